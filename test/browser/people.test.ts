/**
 * Users and groups in the admin console (SPEC §4.5), in Chromium on both backends, driven by
 * the labels an administrator reads: editing a user's display name, e-mail and its verified
 * flag; creating a group, adding and removing members, deleting it; the user list a page of
 * 100 at a time. Plus, over plain HTTP, what an attacker would try: a forged form without its
 * CSRF token, and HTML in names.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { Page } from 'playwright-core';
import { createAccount } from '../../src/accounts/users.ts';
import { insertUser, lookupKey } from '../../src/store/users.ts';
import { BACKENDS, backendOptions } from '../support/backends.ts';
import { browserOptions, launchBrowser, follow, openAs, type TestBrowser } from '../support/browser.ts';
import { PASSWORD, startServer, type TestServer } from '../support/server.ts';
import { UserAgent, formFields } from '../support/user-agent.ts';

const HOSTILE = '<img src=x onerror=alert(1)>';

for (const backend of BACKENDS) {
  describe(`users and groups in the admin console (${backend.name})`, { ...backendOptions(backend), ...browserOptions() }, () => {
    let server: TestServer;
    let browser: TestBrowser;

    before(async () => {
      [server, browser] = await Promise.all([startServer(backend), launchBrowser()]);
      await server.createUser('root', { admin: true });
      await createAccount(
        server.store.db,
        { username: 'alice', email: 'alice@example.com', password: PASSWORD, isAdmin: false, emailVerified: true },
        Date.now(),
      );
      await server.createUser('bob');
    });
    after(async () => {
      await browser?.close();
      await server?.close();
    });

    const open = (path: string): Promise<Page> => openAs(browser, new URL(path, server.url).href, 'root');
    const stored = (username: string) => server.store.db.selectFrom('users').selectAll().where('username', '=', username).executeTakeFirstOrThrow();

    test("an administrator edits a user's display name, e-mail and its verified flag", async () => {
      const admin = await open('/admin/users');
      await admin.getByRole('link', { name: 'alice', exact: true }).click();
      await admin.getByRole('heading', { name: 'Edit alice' }).waitFor();
      assert.equal(await admin.getByLabel('Email address verified').isChecked(), true);

      await admin.getByLabel('Display name').fill('Ali\u200Bce');
      await admin.getByRole('button', { name: 'Save changes' }).click();
      await admin.getByRole('alert').getByText('The changes were not saved.').waitFor();
      assert.equal(await admin.locator('#name-error').textContent(), 'Display name must not hold control, format or invisible characters');
      assert.equal(await admin.getByLabel('Display name').getAttribute('aria-invalid'), 'true');

      // A new address: the box, left as it was, no longer vouches for it.
      await admin.getByLabel('Display name').fill(`Alice ${HOSTILE}`);
      await admin.getByLabel('Email', { exact: true }).fill('alice@new.example');
      await admin.getByRole('button', { name: 'Save changes' }).click();
      await admin.getByRole('status').getByText('Changes saved.').waitFor();
      assert.equal(await admin.getByLabel('Display name').inputValue(), `Alice ${HOSTILE}`);
      assert.equal(await admin.getByLabel('Email', { exact: true }).inputValue(), 'alice@new.example');
      assert.equal(await admin.getByLabel('Email address verified').isChecked(), false);

      await admin.getByLabel('Email address verified').check();
      await admin.getByRole('button', { name: 'Save changes' }).click();
      await admin.getByRole('status').getByText('Changes saved.').waitFor();
      assert.equal(await admin.getByLabel('Email address verified').isChecked(), true);
      const alice = await stored('alice');
      assert.deepEqual([alice.display_name, alice.email, alice.email_verified], [`Alice ${HOSTILE}`, 'alice@new.example', 1]);

      // Taken addresses are refused; the list shows the name and the verified mark.
      await admin.getByLabel('Email', { exact: true }).fill('BOB@example.com');
      await admin.getByRole('button', { name: 'Save changes' }).click();
      assert.equal(await admin.locator('#email-error').textContent(), 'That email address belongs to another account');
      assert.equal((await stored('alice')).email, 'alice@new.example');
      await admin.getByRole('link', { name: 'All users' }).click();
      assert.match(
        (await admin.getByRole('row', { name: /alice@new\.example/ }).textContent())!,
        /Alice <img src=x onerror=alert\(1\)>\s*alice@new\.example \(verified\)/,
      );
    });

    test('an administrator creates a group, adds and removes members, and deletes it', async () => {
      const admin = await open('/admin/users');
      await admin.getByRole('link', { name: 'Groups' }).click();
      await admin.getByRole('heading', { name: 'Groups', level: 1 }).waitFor();

      await admin.getByLabel('Group name').fill('two words');
      await admin.getByRole('button', { name: 'Create group' }).click();
      assert.match((await admin.locator('#name-error').textContent())!, /^Group name must be 1-100 characters, without spaces/);
      assert.equal(await admin.getByLabel('Group name').inputValue(), 'two words');

      await admin.getByLabel('Group name').fill('editors');
      await admin.getByRole('button', { name: 'Create group' }).click();
      await admin.getByRole('status').getByText('Group created.').waitFor();
      await admin.getByLabel('Group name').fill('<b>&co');
      await admin.getByRole('button', { name: 'Create group' }).click();
      await admin.getByRole('status').getByText('Group created.').waitFor();
      await admin.getByRole('heading', { name: '<b>&co' }).waitFor();

      for (const username of ['alice', 'Bob']) {
        await admin.getByLabel('Add a member to editors').fill(username);
        await admin.getByRole('button', { name: 'Add to editors' }).click();
        await admin.getByRole('status').getByText('Member added.').waitFor();
      }
      await admin.getByLabel('Add a member to editors').fill('nobody');
      await admin.getByRole('button', { name: 'Add to editors' }).click();
      await admin.getByRole('alert').getByText('There is no user named "nobody"').waitFor();
      assert.equal(await admin.getByLabel('Add a member to editors').getAttribute('aria-invalid'), 'true');

      const editors = admin.getByRole('region', { name: 'editors' });
      assert.deepEqual(await editors.locator('li span').allTextContents(), ['alice', 'bob']);
      await admin.getByRole('button', { name: 'Remove bob from editors' }).click();
      await admin.getByRole('status').getByText('Member removed.').waitFor();
      assert.deepEqual(await editors.locator('li span').allTextContents(), ['alice']);

      // Both pages fit a 390 px wide phone, no sideways scrolling.
      await admin.setViewportSize({ width: 390, height: 760 });
      const fits = async () => assert.ok(await admin.evaluate('document.documentElement.scrollWidth <= 390'), `${admin.url()} is wider than 390 px`);
      await fits();
      // The user's page names their groups.
      await admin.goto(new URL(`/admin/users/${(await stored('alice')).id}`, server.url).href);
      assert.deepEqual(await admin.locator('dl.facts dd code').allTextContents(), ['editors']);
      await fits();

      await admin.goto(new URL('/admin/users/groups', server.url).href);
      await admin.getByRole('button', { name: 'Delete group editors' }).click();
      await admin.getByRole('status').getByText('Group deleted.').waitFor();
      assert.equal(await admin.getByRole('region', { name: 'editors' }).count(), 0);
      const memberships = await server.store.db.selectFrom('group_members').selectAll().execute();
      assert.deepEqual(memberships, [], 'its memberships went with it');
    });

    test('the user list shows 100 users a page, with links to the next and previous pages, searches included', async () => {
      const { password_hash } = await stored('bob');
      for (let i = 0; i < 120; i++) {
        const username = `user-${String(i).padStart(3, '0')}`;
        await insertUser(server.store.db, {
          id: crypto.randomUUID(),
          username,
          username_key: lookupKey(username),
          email: `${username}@example.com`,
          email_key: lookupKey(`${username}@example.com`),
          display_name: null,
          password_hash,
          is_admin: 0,
          disabled: 0,
          created_at: Date.now(),
        });
      }
      const total = (await server.store.db.selectFrom('users').select('id').execute()).length;
      const admin = await open('/admin/users');
      const usernames = () => admin.locator('tbody tr td:first-child a').allTextContents();
      const first = await usernames();
      assert.equal(first.length, 100);
      assert.equal(await admin.getByRole('link', { name: 'Previous users' }).count(), 0);
      await follow(admin, admin.getByRole('link', { name: 'Next users' }));
      const second = await usernames();
      assert.equal(second.length, total - 100);
      assert.deepEqual([...first, ...second], [...first, ...second].sort(), 'in username order');
      assert.equal(new Set([...first, ...second]).size, total, 'every user once');
      assert.equal(await admin.getByRole('link', { name: 'Next users' }).count(), 0);
      await follow(admin, admin.getByRole('link', { name: 'Previous users' }));
      assert.deepEqual(await usernames(), first);

      await admin.getByLabel('Search users').fill('user-');
      await follow(admin, admin.getByRole('button', { name: 'Search' }));
      assert.equal((await usernames()).length, 100);
      await follow(admin, admin.getByRole('link', { name: 'Next users' }));
      assert.deepEqual(await usernames(), ['user-100', ...Array.from({ length: 19 }, (_, i) => `user-${101 + i}`)]);
      assert.equal(await admin.getByLabel('Search users').inputValue(), 'user-', 'the search is kept');
    });

    test('the resource server list shows 100 a page, the built-in one first, with links to the next and previous pages', async () => {
      const start = Date.now();
      for (let i = 0; i < 105; i++) {
        await server.store.db
          .insertInto('resources')
          .values({
            id: crypto.randomUUID(),
            uri: `https://api-${i}.example/`,
            name: `API ${String(i).padStart(3, '0')}`,
            client_id: null,
            created_at: start + i,
          })
          .execute();
      }
      const admin = await open('/admin/resources');
      const names = () => admin.locator('tbody tr td:first-child a').allTextContents();
      const first = await names();
      assert.equal(first.length, 100);
      assert.equal(first[1], 'API 000', 'oldest first, after the built-in resource');
      assert.equal(await admin.getByRole('link', { name: 'Previous resource servers' }).count(), 0);
      await follow(admin, admin.getByRole('link', { name: 'Next resource servers' }));
      const second = await names();
      assert.deepEqual(second, ['API 099', 'API 100', 'API 101', 'API 102', 'API 103', 'API 104']);
      assert.equal(await admin.getByRole('link', { name: 'Next resource servers' }).count(), 0);
      await follow(admin, admin.getByRole('link', { name: 'Previous resource servers' }));
      assert.deepEqual(await names(), first);
    });

    test('a group form without its CSRF token is refused and changes nothing; names come back escaped', async () => {
      const admin = new UserAgent(server.url);
      await admin.login('root');
      const page = await admin.visit('/admin/users/groups');
      const forged = formFields(page.html, '/admin/users/groups');
      forged.delete('_csrf');
      forged.set('name', 'forged');
      assert.equal((await admin.fetch('/admin/users/groups', { method: 'POST', body: forged })).status, 403);
      forged.set('_csrf', 'not-the-token');
      assert.equal((await admin.fetch('/admin/users/groups', { method: 'POST', body: forged })).status, 403);
      assert.equal(await server.store.db.selectFrom('groups').select('name').where('name', '=', 'forged').executeTakeFirst(), undefined);

      const made = await admin.submit(page.html, '/admin/users/groups', { name: `x${HOSTILE.replaceAll(' ', '')}` });
      assert.equal(made.response.status, 200);
      assert.ok(!made.html.includes('<img'), 'no tag from a group name reaches the page');
      assert.match(made.html, /x&lt;imgsrc=xonerror=alert\(1\)&gt;/);
      const users = await admin.visit('/admin/users?q=alice');
      assert.ok(!users.html.includes(HOSTILE) && users.html.includes('Alice &lt;img src=x onerror=alert(1)&gt;'), 'the display name is escaped');
    });
  });
}
