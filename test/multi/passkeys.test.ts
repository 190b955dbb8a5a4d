/**
 * Passkeys across instances (SPEC §1, §4.12): a challenge issued by one instance is answered
 * at another — the challenge lives in the shared PostgreSQL database, bound to the browser,
 * not in any instance's memory. The browser's requests to the answering endpoints are sent
 * to the second instance, as a load balancer might; cookies are per host name, not per port,
 * so the browser's cookies go with them.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { Page } from 'playwright-core';
import { postgres } from '../support/backends.ts';
import { browserOptions, launchBrowser, logIn, type TestBrowser } from '../support/browser.ts';
import { startCluster, type Cluster } from '../support/instances.ts';
import { addVirtualAuthenticator, withoutAutofill } from '../support/webauthn.ts';

describe('passkeys on two instances', { ...(postgres.unavailable ? { skip: `needs PostgreSQL: ${postgres.unavailable}` } : {}), ...browserOptions() }, () => {
  let cluster: Cluster;
  let browser: TestBrowser;
  /** The paths the second instance answered, in order. */
  const answeredAtSecond: string[] = [];

  /** Sends the page's POSTs to `path` to the second instance (on localhost, another port) instead of the first. */
  async function answerAtSecond(page: Page, path: string) {
    const second = new URL(cluster.instances[1]!.url);
    await page.route(`**${path}`, async (route) => {
      const target = new URL(route.request().url());
      target.port = second.port;
      const response = await route.fetch({ url: target.href });
      answeredAtSecond.push(`${path} ${response.status()}`);
      await route.fulfill({ response });
    });
  }

  before(async () => {
    [cluster, browser] = await Promise.all([startCluster(2, {}, undefined, 'localhost'), launchBrowser()]);
    await cluster.createUser('alice');
  });
  after(async () => {
    await browser?.close();
    await cluster?.close();
  });

  test('a passkey added and used with challenges issued at one instance and answered at the other', async () => {
    const page = await (await withoutAutofill(browser)).newPage();
    await addVirtualAuthenticator(page);
    await answerAtSecond(page, '/account/security/passkeys');
    await answerAtSecond(page, '/login/passkey');

    await page.goto(new URL('/account/security', cluster.publicUrl).href);
    await logIn(page, 'alice');
    await page.getByLabel('Passkey name').fill('Laptop');
    await page.getByRole('button', { name: 'Add a passkey' }).click();
    await page.getByRole('status').getByText('Passkey added.').waitFor();
    await page.getByRole('rowheader', { name: 'Laptop' }).waitFor();

    await page.getByRole('button', { name: 'Log out' }).click();
    await page.getByRole('button', { name: 'Log in with a passkey' }).click();
    await page.waitForURL((url) => url.pathname === '/');
    await page.getByRole('button', { name: 'Log out' }).waitFor();

    assert.deepEqual(answeredAtSecond, ['/account/security/passkeys 200', '/login/passkey 200']);
    const sessions = await cluster.store.db.selectFrom('sessions').select('amr').execute();
    assert.deepEqual(
      sessions.map((s) => s.amr),
      ['hwk user mfa'],
    );
    const challenges = await cluster.store.db.selectFrom('webauthn_challenges').selectAll().execute();
    assert.deepEqual(challenges, [], 'every challenge answered is gone');
  });
});
