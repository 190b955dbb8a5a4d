/**
 * `gatehouse connection …` and `gatehouse user unlink` (SPEC §2, §4.13), run as an operator
 * runs them, on the database a real server shares (with KEYS_SECRET, so secrets are sealed):
 * a connection per preset, an OpenID Connect issuer and an oauth2 provider, each with the
 * callback URL to register; the provider's secret read from standard input, sealed, never
 * printed; bad input refused with one line; updates, disabling (the sessions that came
 * through end), enabling and deleting, audited; and an administrator unlinking a person's
 * identity, the last way to log in included. The identities are made by the real federated
 * login (accounts/connections/federated-login.ts), as if the provider had just answered.
 *
 * Every command is a process (about a second each): independent ones run at once, and the
 * help and the refusals that depend on nothing stored run once, on SQLite.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { clientSecretOf, connectionNamed } from '../src/accounts/connections/connections.ts';
import { federatedLogin } from '../src/accounts/connections/federated-login.ts';
import { createAccount } from '../src/accounts/users.ts';
import { parseDatabaseUrl } from '../src/config.ts';
import { migrate, openStore } from '../src/store/database.ts';
import type { User } from '../src/store/schema.ts';
import { BACKENDS, backendOptions, sqlite } from './support/backends.ts';
import { databaseUrl, gatehouse, type Run } from './support/processes.ts';
import { PASSWORD, startServer, type TestServer } from './support/server.ts';

const KEYS_SECRET = 'cli-connections-test-keys-secret-0123456789';
const TENANT = '72f988bf-86f1-41af-91ab-2d7cd011db47';
/** The client secret each provider gave, by connection id: none may ever be printed. */
const SECRETS: Record<string, string> = {
  github: 'gh-secret-3f9a1c7e5b',
  google: 'GOCSPX-google-secret-8d2e',
  microsoft: 'ms~secret.Qx7_4Yb',
  gitlab: 'gloas-gitlab-secret-5c1d',
  orcid: 'orcid-secret-0b6f-44a2',
  'company-idp': 'company-idp-secret-91e3',
  'legacy-sso': 'legacy-sso-secret-7a7a',
};
const NEW_GITHUB_SECRET = 'gh-secret-rotated-e41b0c';
const ALL_SECRETS = [...Object.values(SECRETS), NEW_GITHUB_SECRET];

/** Succeeded, printing one JSON document. */
function printed(run: Run): unknown {
  assert.equal(run.code, 0, `exit ${run.code}: ${run.stderr}`);
  return JSON.parse(run.stdout);
}

/** Succeeded, printing text. */
function said(run: Run): string {
  assert.equal(run.code, 0, `exit ${run.code}: ${run.stderr}`);
  return run.stdout;
}

/** Exit 2 with one line on stderr matching `message`, printing nothing else. */
function refused(run: Run, message: RegExp): void {
  assert.deepEqual([run.code, run.stdout, run.stderr.trimEnd().split('\n').length], [2, '', 1], run.stderr);
  assert.match(run.stderr.trimEnd(), message);
}

/** Neither what a command printed nor anything else here shows a provider's secret. */
function assertNoSecret(text: string): void {
  for (const secret of ALL_SECRETS) assert.ok(!text.includes(secret), `a client secret was shown: ${text}`);
}

describe('gatehouse connection: its help, and what the command line itself refuses', () => {
  test('the commands, their usage and options are in the help', async () => {
    const [create, noun, unlink, all] = await Promise.all([
      gatehouse(['connection', 'create', '--help'], {}),
      gatehouse(['connection', '--help'], {}),
      gatehouse(['user', 'unlink', '--help'], {}),
      gatehouse(['--help'], {}),
    ]);
    assert.match(
      said(create),
      /^Usage: gatehouse connection create --name <n> \(--preset github\|google\|microsoft\|gitlab\|orcid \| --issuer <url> \| --kind oauth2 /,
    );
    for (const option of ['--client-secret-stdin', '--tenant <value>', '--domains <value>', '--required', '--create-accounts', '--allow-private-address'])
      assert.match(create.stdout, new RegExp(`\n  ${option} {2,}\\S`), `${option}, with what it does, in:\n${create.stdout}`);
    assert.match(create.stdout, /read from standard input with\n--client-secret-stdin \(else prompted for\), sealed at rest, never shown/);
    for (const words of ['create', 'list', 'update <id>', 'disable <id>', 'enable <id>', 'delete <id>'])
      assert.match(said(noun), new RegExp(`^  connection ${words}`, 'm'));
    assert.match(said(unlink), /^Usage: gatehouse user unlink <username> <connection id>\n\nunlinks the user's identity at the connection/);
    assert.match(said(all), /^  connection update <id> /m);
    assert.match(all.stdout, /^  user unlink <username> <connection id> +unlinks/m);
    assert.match(all.stdout, /unless --client-secret-stdin is/);
  });

  test('bad input is refused with one line and exit 2, and nothing is stored: the secret never an option, the provider named one way', async () => {
    const database = await sqlite.create();
    // Migrated first: commands started at once on a database none has migrated yet would race to create its tables.
    const store = openStore(parseDatabaseUrl(database.url));
    await migrate(store);
    await createAccount(store.db, { username: 'bob', email: 'bob@example.com', password: PASSWORD, isAdmin: false }, Date.now());
    try {
      const cli = (args: string[], input?: string) => gatehouse(args, { DATABASE_URL: database.url }, input);
      const create = ['connection', 'create', '--name', 'Bad', '--client-id', 'bad-client'];
      const withSecret = (...args: string[]) => cli([...create, '--client-secret-stdin', ...args], 'bad-secret\n');
      const runs = await Promise.all([
        withSecret('--preset', 'microsoft', '--tenant', 'contoso.onmicrosoft.com'),
        withSecret('--issuer', 'http://idp.example.com'),
        withSecret(
          ...['--kind', 'oauth2', '--authorization-url', 'https://sso.example.net/a', '--token-url', 'https://sso.example.net/t?x=1'],
          '--userinfo-url',
          'https://sso.example.net/u',
        ),
        withSecret('--issuer', 'https://idp.example.com', '--required'),
        cli([...create, '--preset', 'google']),
        cli([...create, '--preset', 'google', '--client-secret-stdin'], ' \n'),
        cli([...create, '--preset', 'google', '--client-secret', 'flag-secret-value']),
        cli([...create, '--preset', 'google', '--issuer', 'https://idp.example.com', '--client-secret-stdin'], 'secret\n'),
        cli([...create, '--issuer', 'https://idp.example.com', '--token-url', 'https://idp.example.com/token', '--client-secret-stdin'], 'secret\n'),
        cli(['connection', 'update', 'google', '--json']),
        cli(['user', 'unlink', 'nobody', 'google']),
        cli(['user', 'unlink', 'bob', 'nowhere']),
      ]);
      const [notGuid, http, query, requiredAlone, noTerminal, emptySecret, secretFlag, twoProviders, issuerAndUrls, nothing, nobody, nowhere] = runs;
      refused(notGuid!, /^gatehouse: The microsoft preset needs --tenant: the Directory \(tenant\) ID, a GUID$/);
      refused(http!, /^gatehouse: --issuer: Issuer must be an https URL$/);
      refused(query!, /^gatehouse: --token-url: Token URL must have no query, fragment or credentials$/);
      refused(requiredAlone!, /^gatehouse: A required connection needs --domains: the people it is required for$/);
      refused(noTerminal!, /^gatehouse: no terminal to prompt for the client secret: pass it on standard input with --client-secret-stdin$/);
      refused(emptySecret!, /^gatehouse: no client secret given/);
      refused(secretFlag!, /^gatehouse: unknown option --client-secret for "connection create"/);
      assert.ok(!secretFlag!.stderr.includes('flag-secret-value'));
      refused(twoProviders!, /^gatehouse: --preset fills in the provider: give it without --issuer, --kind and the --…-url options$/);
      refused(issuerAndUrls!, /^gatehouse: --issuer makes an OpenID Connect connection; an oauth2 one takes --authorization-url/);
      refused(nothing!, /^gatehouse: nothing to change/);
      refused(nobody!, /^gatehouse: no user named nobody$/);
      refused(nowhere!, /^gatehouse: no connection with the id nowhere; see gatehouse connection list$/);
      assert.deepEqual(await store.db.selectFrom('connections').select('id').execute(), []);
    } finally {
      await store.close();
      await database.drop();
    }
  });
});

for (const backend of BACKENDS) {
  describe(`gatehouse connection and user unlink (${backend.name})`, backendOptions(backend), () => {
    let server: TestServer;
    let bob: User;
    const cli = (args: string[], input?: string) => gatehouse(args, { DATABASE_URL: databaseUrl(server.config), PUBLIC_URL: server.url, KEYS_SECRET }, input);
    /** `connection create` with a client ID and the connection's secret on standard input (a line, as `echo` gives it). */
    const create = (id: string, name: string, ...args: string[]) =>
      cli(['connection', 'create', '--name', name, '--client-id', `${id}-client`, '--client-secret-stdin', ...args], `${SECRETS[id]}\n`);
    const callback = (id: string) => `${server.url}/login/connections/${id}/callback`;
    const rows = () => server.store.db.selectFrom('connections').selectAll().orderBy('id').execute();
    const auditOf = (...types: string[]) =>
      server.store.db.selectFrom('audit_events').select(['type', 'actor_id', 'user_id', 'detail']).where('type', 'in', types).orderBy('id').execute();
    /** A login through the connection as the provider vouched for `subject`: a new person, or (`linkUserId`) Connect. */
    async function logInThrough(connectionId: string, subject: string, username: string, linkTo: User | null = null) {
      const ctx = server.app.gatehouse;
      const identity = { subject, email: `${username}@corp.example`, emailVerified: true, name: null, preferredUsername: username, groups: null, amr: 'fed' };
      const outcome = await federatedLogin(ctx, await connectionNamed(ctx, connectionId), {
        identity,
        linkUserId: linkTo?.id ?? null,
        // Connect finishes in the session of the person who asked, logged in just now.
        signedIn: linkTo === null ? null : { user: linkTo, login: { authTime: ctx.now(), amr: 'pwd', sid: null } },
        address: '127.0.0.1',
        previousSession: undefined,
        tokens: { access_token: 'provider-access-token', refresh_token: null, scope: null, expires_at: null },
      });
      assert.equal(outcome.kind, linkTo === null ? 'session' : 'linked');
      return (outcome as { user: User }).user;
    }
    const sessionsThrough = async (connectionId: string) =>
      (await server.store.db.selectFrom('sessions').select('user_id').where('connection_id', '=', connectionId).execute()).map((s) => s.user_id);

    before(async () => {
      server = await startServer(backend, { KEYS_SECRET });
      bob = await server.createUser('bob');
      await server.createUser('carol');
    });
    after(() => server?.close());

    test('create with each preset, an issuer and an oauth2 provider: the callback URL to register, the secret sealed and never shown; list', async () => {
      const runs = await Promise.all([
        create('github', 'GitHub', '--preset', 'github', '--json'),
        create('google', 'Google', '--preset', 'google'),
        create('microsoft', 'Microsoft', '--preset', 'microsoft', '--tenant', TENANT, '--json'),
        create('gitlab', 'GitLab', '--preset', 'gitlab', '--base-url', 'https://gitlab.example.org/', '--json'),
        create('orcid', 'ORCID', '--preset', 'orcid', '--json'),
        create(
          'company-idp',
          'Company IdP',
          ...['--issuer', 'https://idp.example.com', '--scope', 'openid email groups', '--domains', 'corp.example, Example.ORG', '--required'],
          ...['--no-create-accounts', '--link-verified-email', '--groups-claim', 'groups', '--trust-mfa', '--allow-private-address', '--json'],
        ),
        create(
          'legacy-sso',
          'Legacy SSO',
          ...['--kind', 'oauth2', '--authorization-url', 'https://sso.example.net/oauth/authorize', '--token-url', 'https://sso.example.net/oauth/token'],
          ...['--userinfo-url', 'https://sso.example.net/api/me', '--scope', 'profile', '--json'],
        ),
      ]);
      const [github, google, ...others] = runs;
      assert.deepEqual(printed(github!), { id: 'github', callback_url: callback('github') });
      assert.deepEqual(
        others.map((run) => printed(run)),
        ['microsoft', 'gitlab', 'orcid', 'company-idp', 'legacy-sso'].map((id) => ({ id, callback_url: callback(id) })),
      );
      // Without --json, the callback URL stands on a line of its own, said to be registered at the provider.
      assert.match(said(google!), /^Created connection "Google" \(id: google\)\.\n\nRegister this callback \(redirect\) URL at the provider:\n\n {4}(\S+)\n/);
      assert.ok(google!.stdout.includes(`\n    ${callback('google')}\n`));

      // What is refused because of what is stored: an id mistyped; a required connection's domains cleared.
      const [listed, table, unknown, requiredCleared] = await Promise.all([
        cli(['connection', 'list', '--json']),
        cli(['connection', 'list']),
        cli(['connection', 'update', 'githb', '--trust-mfa']),
        cli(['connection', 'update', 'company-idp', '--domains', '']),
      ]);
      refused(unknown, /^gatehouse: no connection with the id githb; did you mean github\?$/);
      refused(requiredCleared, /^gatehouse: A required connection needs --domains/);
      assert.deepEqual(await auditOf('connection_updated'), []);
      const connections = printed(listed) as Array<Record<string, unknown>>;
      assert.deepEqual(
        connections.map((c) => [c.id, c.kind, c.preset, c.issuer ?? c.authorization_url, c.scope, c.callback_url]),
        [
          ['company-idp', 'oidc', null, 'https://idp.example.com', 'openid email groups', callback('company-idp')],
          ['github', 'oauth2', 'github', 'https://github.com/login/oauth/authorize', 'read:user user:email', callback('github')],
          ['gitlab', 'oidc', 'gitlab', 'https://gitlab.example.org', 'openid email profile', callback('gitlab')],
          ['google', 'oidc', 'google', 'https://accounts.google.com', 'openid email profile', callback('google')],
          ['legacy-sso', 'oauth2', null, 'https://sso.example.net/oauth/authorize', 'profile', callback('legacy-sso')],
          ['microsoft', 'oidc', 'microsoft', `https://login.microsoftonline.com/${TENANT}/v2.0`, 'openid email profile', callback('microsoft')],
          ['orcid', 'oidc', 'orcid', 'https://orcid.org', 'openid', callback('orcid')],
        ],
      );
      const company = connections[0]!;
      assert.deepEqual(
        [company.name, company.client_id, company.domains, company.required, company.create_accounts, company.link_verified_email],
        ['Company IdP', 'company-idp-client', ['corp.example', 'example.org'], true, false, true],
      );
      assert.deepEqual([company.groups_claim, company.trust_mfa, company.allow_private_address, company.enabled], ['groups', true, true, true]);
      assert.ok(connections.every((c) => !('client_secret' in c) && !('encrypted' in c)));
      assert.match(
        said(table),
        new RegExp(
          `^company-idp\\tCompany IdP\\toidc\\thttps://idp\\.example\\.com\\tenabled\\tclient_id: company-idp-client\\tcallback: ${callback('company-idp')}` +
            '\\tdomains: corp\\.example example\\.org \\(required\\)\\tno new accounts\\tlinks verified email\\tgroups: groups\\ttrusts MFA\\tprivate addresses allowed$',
          'm',
        ),
      );
      assert.match(table.stdout, /^github\tGitHub\tgithub\thttps:\/\/github\.com\/login\/oauth\/authorize\tenabled\tclient_id: github-client\tcallback: \S+$/m);
      for (const run of [...runs, listed, table]) assertNoSecret(run.stdout + run.stderr);

      // Sealed under KEYS_SECRET: the row holds a JWE, which opens to the secret as given (its line end dropped).
      for (const row of await rows()) {
        assert.equal(row.encrypted, 1, row.id);
        assertNoSecret(row.client_secret);
        assert.equal(await clientSecretOf(server.app.gatehouse, row), SECRETS[row.id]);
      }
      const audit = await auditOf('connection_created');
      assert.deepEqual(
        audit.map((event) => [JSON.parse(event.detail!).connection, event.actor_id]).sort(),
        Object.keys(SECRETS)
          .sort()
          .map((id) => [id, null]),
      );
    });

    test('update, disable, enable and delete, each audited: disabling ends the sessions that came through, deleting unlinks', async () => {
      const erin = await logInThrough('google', 'google-erin', 'erin');
      const fay = await logInThrough('gitlab', 'gitlab-fay', 'fay');
      assert.deepEqual(await sessionsThrough('google'), [erin.id]);
      const [github, orcid, company, legacy, deleted, disabled] = await Promise.all([
        // The secret is replaced from standard input, other settings with it (--required, as domains come too).
        cli(
          [
            ...[
              'connection',
              'update',
              'github',
              '--name',
              'GitHub Enterprise',
              '--base-url',
              'https://github.example.com',
              '--domains',
              'a.example,b.example',
            ],
            ...['--required', '--trust-mfa', '--client-secret-stdin', '--json'],
          ],
          `${NEW_GITHUB_SECRET}\n`,
        ),
        cli(['connection', 'update', 'orcid', '--issuer', 'https://login.example.edu', '--scope', 'openid email', '--json']),
        cli(['connection', 'update', 'company-idp', '--domains', '', '--no-required', '--create-accounts', '--groups-claim', '']),
        cli(['connection', 'update', 'legacy-sso', '--scope', 'profile']),
        cli(['connection', 'delete', 'gitlab', '--json']),
        cli(['connection', 'disable', 'google']),
      ]);
      const orcidJson = printed(orcid) as Record<string, unknown>;
      assert.deepEqual(
        [orcidJson.preset, orcidJson.kind, orcidJson.issuer, orcidJson.scope, orcidJson.callback_url],
        [null, 'oidc', 'https://login.example.edu', 'openid email', callback('orcid')],
      );
      assert.match(
        said(company),
        /^Updated connection company-idp:\ncompany-idp\tCompany IdP\toidc\thttps:\/\/idp\.example\.com\tenabled\t.*\ttrusts MFA\tprivate addresses allowed\n$/,
      );
      assert.doesNotMatch(company.stdout, /domains|no new accounts|groups:/);
      assert.equal(said(legacy), 'Connection legacy-sso: nothing changed.\n');
      assert.deepEqual(printed(deleted), { id: 'gitlab', deleted: true });
      assert.equal(said(disabled), 'Connection google is disabled; the sessions that came through it are ended.\n');
      assert.deepEqual(await sessionsThrough('google'), []);
      assert.deepEqual(
        await server.store.db.selectFrom('user_identities').select('connection_id').where('user_id', '=', fay.id).execute(),
        [],
        "deleting a connection unlinks its people's identities",
      );
      assert.ok(await server.store.db.selectFrom('users').select('id').where('id', '=', fay.id).executeTakeFirst(), 'and keeps their accounts');

      const enabled = await cli(['connection', 'enable', 'google', '--json']);
      const githubJson = printed(github) as Record<string, unknown>;
      assert.deepEqual(
        [
          githubJson.name,
          githubJson.base_url,
          githubJson.authorization_url,
          githubJson.userinfo_url,
          githubJson.domains,
          githubJson.required,
          githubJson.trust_mfa,
        ],
        [
          'GitHub Enterprise',
          'https://github.example.com',
          'https://github.example.com/login/oauth/authorize',
          'https://github.example.com/api/v3/user',
          ['a.example', 'b.example'],
          true,
          true,
        ],
      );
      assert.deepEqual(printed(enabled), { id: 'google', enabled: true });
      const byId = new Map((await rows()).map((row) => [row.id, row]));
      assert.deepEqual(
        [byId.has('gitlab'), byId.get('google')!.enabled, byId.get('company-idp')!.domains, byId.get('company-idp')!.groups_claim],
        [false, 1, '[]', null],
      );
      assert.equal(await clientSecretOf(server.app.gatehouse, byId.get('github')!), NEW_GITHUB_SECRET);
      assertNoSecret(JSON.stringify([...byId.values()].map((row) => row.client_secret)) + github.stdout);

      const audit = await auditOf('connection_updated', 'connection_disabled', 'connection_enabled', 'connection_deleted');
      assertNoSecret(JSON.stringify(audit));
      assert.ok(audit.every((event) => event.actor_id === null));
      assert.deepEqual(audit.map((event) => `${event.type} ${JSON.parse(event.detail!).connection} ${JSON.parse(event.detail!).changed ?? ''}`.trim()).sort(), [
        'connection_deleted gitlab',
        'connection_disabled google',
        'connection_enabled google',
        'connection_updated company-idp domains groups_claim required create_accounts',
        'connection_updated github name domains required trust_mfa base_url authorization_url token_url userinfo_url client_secret',
        'connection_updated orcid scope preset issuer',
      ]);
    });

    test('user unlink: an administrator unlinks an identity, even the last way to log in, and the sessions through it end', async () => {
      const dana = await logInThrough('microsoft', 'ms-dana', 'dana');
      await logInThrough('microsoft', 'ms-bob', 'bob', bob);
      const [danaRun, bobRun, notLinked] = await Promise.all([
        cli(['user', 'unlink', 'dana', 'microsoft']),
        cli(['user', 'unlink', 'bob', 'microsoft', '--json']),
        cli(['user', 'unlink', 'carol', 'microsoft']),
      ]);
      // dana's account came from the provider: no password, no passkey — the command says she cannot log in now.
      assert.equal(
        said(danaRun),
        "Unlinked dana's identity at Microsoft (microsoft); their sessions that came through it are ended.\n" +
          'Warning: dana has no other way to log in now (no password they may use, passkey or other connection).\n',
      );
      assert.deepEqual(printed(bobRun), { username: 'bob', connection: 'microsoft', unlinked: true, can_log_in: true });
      refused(notLinked, /^gatehouse: carol has no identity at microsoft$/);
      assert.deepEqual(await server.store.db.selectFrom('user_identities').select('user_id').where('connection_id', '=', 'microsoft').execute(), []);
      assert.deepEqual(await sessionsThrough('microsoft'), []);
      const audit = await auditOf('identity_unlinked');
      assert.deepEqual(
        audit.map((event) => [event.user_id, event.actor_id, JSON.parse(event.detail!).connection]).sort(),
        [
          [bob.id, null, 'microsoft'],
          [dana.id, null, 'microsoft'],
        ].sort(),
      );
    });
  });
}
