/** Settings (src/config.ts `loadConfig`): defaults, accepted forms, and that a bad value stops start-up naming the setting. */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { describe, test } from 'node:test';
import { ConfigError, SETTINGS, declaredOnly, loadConfig } from '../../src/config.ts';

/** Asserts that `env` is refused with a ConfigError whose message names `setting`. */
function refuses(env: Record<string, string>, setting: string): void {
  assert.throws(
    () => loadConfig(env),
    (error: unknown) => {
      assert.ok(error instanceof ConfigError, String(error));
      assert.ok(error.message.includes(setting), `"${error.message}" should name ${setting}`);
      return true;
    },
  );
}

const INTEGER_SETTINGS = [
  'PORT',
  'ACCESS_TOKEN_TTL',
  'JWT_ACCESS_TOKEN_TTL',
  'REFRESH_TOKEN_TTL',
  'AUTH_CODE_TTL',
  'REFRESH_GRACE_SECONDS',
  'SESSION_TTL',
  'CONSENT_TTL',
  'PURGE_INTERVAL_SECONDS',
  'AUDIT_RETENTION_DAYS',
  'LOGIN_FAILURES_PER_ACCOUNT',
  'LOGIN_FAILURES_PER_ADDRESS',
  'LOGIN_THROTTLE_WINDOW',
  'TOKEN_REQUESTS_PER_CLIENT',
  'TOKEN_REQUESTS_PER_ADDRESS',
];

describe('loadConfig', () => {
  test('an empty environment gives working defaults', () => {
    const config = loadConfig({});
    assert.equal(config.port, 5000);
    assert.equal(config.host, '127.0.0.1');
    assert.equal(config.publicUrl, 'http://localhost:5000');
    assert.deepEqual(config.database, { kind: 'sqlite', path: './data/gatehouse.db', groupCommit: true });
    assert.equal(config.redisUrl, null);
    assert.equal(config.trustProxy, false);
    assert.equal(config.requirePkce, false);
    assert.equal(config.logLevel, 'info');
    assert.equal(config.jwtAccessTokenTtl, 300);
    assert.ok(Object.isFrozen(config) && Object.isFrozen(config.throttle));
  });

  test('SQLITE_GROUP_COMMIT=false gives each SQLite write its own transaction; PostgreSQL ignores it', () => {
    assert.deepEqual(loadConfig({ SQLITE_GROUP_COMMIT: 'false' }).database, { kind: 'sqlite', path: './data/gatehouse.db', groupCommit: false });
    assert.deepEqual(loadConfig({ SQLITE_GROUP_COMMIT: 'false', DATABASE_URL: 'postgres://db/x' }).database, { kind: 'postgres', url: 'postgres://db/x' });
  });

  test('an empty value means the default, not zero', () => {
    assert.equal(loadConfig({ PORT: '', ACCESS_TOKEN_TTL: '' }).accessTokenTtl, 3600);
  });

  test('values are read and typed', () => {
    const config = loadConfig({
      PORT: '8080',
      PUBLIC_URL: 'https://id.example/gatehouse///',
      DATABASE_URL: 'postgresql://u@db.example/gh',
      REDIS_URL: 'rediss://cache.example:6380',
      REQUIRE_PKCE: 'yes',
      LOG_LEVEL: 'debug',
      LOGIN_FAILURES_PER_ACCOUNT: '0',
    });
    assert.equal(config.port, 8080);
    assert.equal(config.publicUrl, 'https://id.example/gatehouse', 'trailing slashes are dropped');
    assert.deepEqual(config.database, { kind: 'postgres', url: 'postgresql://u@db.example/gh' });
    assert.equal(config.redisUrl, 'rediss://cache.example:6380');
    assert.equal(config.requirePkce, true);
    assert.equal(config.logLevel, 'debug');
    assert.equal(config.throttle.loginFailuresPerAccount, 0, '0 turns a throttle counter off');
  });

  test('TRUST_PROXY: off, a hop count, or a list of addresses and ranges', () => {
    assert.equal(loadConfig({ TRUST_PROXY: 'false' }).trustProxy, false);
    assert.equal(loadConfig({ TRUST_PROXY: '0' }).trustProxy, false);
    assert.equal(loadConfig({ TRUST_PROXY: '2' }).trustProxy, 2);
    assert.deepEqual(loadConfig({ TRUST_PROXY: '10.0.0.0/8, ::1' }).trustProxy, ['10.0.0.0/8', '::1']);
  });

  test('WORKERS: 1 by default, a whole number up to 64, or auto (one per core)', () => {
    assert.equal(loadConfig({}).workers, 1);
    assert.equal(loadConfig({ WORKERS: '4' }).workers, 4);
    assert.equal(loadConfig({ WORKERS: 'auto' }).workers, Math.min(availableParallelism(), 64));
    for (const bad of ['0', '65', 'two', '-1', '1.5'])
      assert.throws(
        () => loadConfig({ WORKERS: bad }),
        (error: Error) => error instanceof ConfigError && error.message.startsWith('WORKERS must be'),
      );
  });

  test('REQUIRE_PKCE accepts the usual spellings of true and false', () => {
    for (const value of ['1', 'true', 'TRUE', 'on']) assert.equal(loadConfig({ REQUIRE_PKCE: value }).requirePkce, true, value);
    for (const value of ['0', 'false', 'No', 'off']) assert.equal(loadConfig({ REQUIRE_PKCE: value }).requirePkce, false, value);
  });

  test('DPOP_NONCES: off by default; on only with KEYS_SECRET, which every instance makes the nonces from', () => {
    assert.equal(loadConfig({}).dpopNonces, false);
    assert.equal(loadConfig({ DPOP_NONCES: 'true', KEYS_SECRET: 'k'.repeat(32) }).dpopNonces, true);
    refuses({ DPOP_NONCES: 'true' }, 'KEYS_SECRET');
  });

  for (const setting of INTEGER_SETTINGS) {
    test(`${setting}: a value that is not a whole number stops start-up, naming it`, () => {
      for (const value of ['ten', '-1', '1.5', '1e3', ' 5']) refuses({ [setting]: value }, setting);
    });
  }

  test('integer settings out of their range stop start-up, naming them', () => {
    refuses({ PORT: '65536' }, 'PORT');
    refuses({ AUTH_CODE_TTL: '0' }, 'AUTH_CODE_TTL');
    refuses({ AUTH_CODE_TTL: '3601' }, 'AUTH_CODE_TTL');
    refuses({ REFRESH_GRACE_SECONDS: '3601' }, 'REFRESH_GRACE_SECONDS');
    refuses({ SESSION_TTL: '59' }, 'SESSION_TTL');
    refuses({ ACCESS_TOKEN_TTL: '0' }, 'ACCESS_TOKEN_TTL');
    refuses({ JWT_ACCESS_TOKEN_TTL: '59' }, 'JWT_ACCESS_TOKEN_TTL');
    refuses({ JWT_ACCESS_TOKEN_TTL: '3601' }, 'JWT_ACCESS_TOKEN_TTL');
    refuses({ AUDIT_RETENTION_DAYS: '36501' }, 'AUDIT_RETENTION_DAYS');
    refuses({ LOGIN_THROTTLE_WINDOW: '0' }, 'LOGIN_THROTTLE_WINDOW');
  });

  test('PUBLIC_URL must be an absolute http(s) URL without query or fragment', () => {
    for (const value of ['id.example', '/gatehouse', 'ftp://id.example', 'https://id.example/?x=1', 'https://id.example/#top']) {
      refuses({ PUBLIC_URL: value }, 'PUBLIC_URL');
    }
  });

  test('DATABASE_URL must be sqlite:<path> or a postgres URL', () => {
    for (const value of ['sqlite:', 'mysql://db.example/gh', './data/gatehouse.db', 'postgres://[bad']) {
      refuses({ DATABASE_URL: value }, 'DATABASE_URL');
    }
  });

  test('REDIS_URL must be a redis:// or rediss:// URL', () => {
    refuses({ REDIS_URL: 'http://cache.example' }, 'REDIS_URL');
    refuses({ REDIS_URL: 'cache.example:6379' }, 'REDIS_URL');
  });

  test('TRUST_PROXY must not be anything else (trusting everyone would let clients pick their address)', () => {
    refuses({ TRUST_PROXY: 'true' }, 'TRUST_PROXY');
    refuses({ TRUST_PROXY: 'proxy.internal' }, 'TRUST_PROXY');
    refuses({ TRUST_PROXY: '10.0.0.1,' }, 'TRUST_PROXY');
  });

  test('REQUIRE_PKCE and LOG_LEVEL refuse values they do not know', () => {
    refuses({ REQUIRE_PKCE: 'maybe' }, 'REQUIRE_PKCE');
    refuses({ LOG_LEVEL: 'verbose' }, 'LOG_LEVEL');
    refuses({ LOG_LEVEL: 'INFO' }, 'LOG_LEVEL');
  });
  test('WEBAUTHN_RP_ID: the host name of PUBLIC_URL by default, off on an IP address, a parent domain allowed', () => {
    assert.deepEqual(loadConfig({}).webauthn, { rpId: 'localhost', origin: 'http://localhost:5000' });
    assert.deepEqual(loadConfig({ PUBLIC_URL: 'https://Login.Example.com/gatehouse' }).webauthn, {
      rpId: 'login.example.com',
      origin: 'https://login.example.com',
    });
    assert.equal(loadConfig({ PUBLIC_URL: 'http://127.0.0.1:5000' }).webauthn, null);
    assert.equal(loadConfig({ PUBLIC_URL: 'http://[::1]:5000' }).webauthn, null);
    assert.deepEqual(loadConfig({ PUBLIC_URL: 'https://login.example.com', WEBAUTHN_RP_ID: 'example.com' }).webauthn, {
      rpId: 'example.com',
      origin: 'https://login.example.com',
    });
    refuses({ PUBLIC_URL: 'https://login.example.com', WEBAUTHN_RP_ID: 'other.example' }, 'WEBAUTHN_RP_ID');
    refuses({ PUBLIC_URL: 'https://login.example.com', WEBAUTHN_RP_ID: 'ample.com' }, 'WEBAUTHN_RP_ID');
    refuses({ PUBLIC_URL: 'http://127.0.0.1:5000', WEBAUTHN_RP_ID: '127.0.0.1' }, 'WEBAUTHN_RP_ID');
    refuses({ WEBAUTHN_RP_ID: 'https://localhost' }, 'WEBAUTHN_RP_ID');
  });

  test('SETTINGS names every setting loadConfig reads, no more: what --help lists is what is read', () => {
    const read = new Set<string>();
    const recording = new Proxy({} as Record<string, string | undefined>, {
      get: (_, name) => {
        if (typeof name === 'string') read.add(name);
        return undefined;
      },
    });
    loadConfig(recording);
    assert.deepEqual([...read].sort(), SETTINGS.map((setting) => setting.name).sort());
    // Also a read that only some values reach: every name config.ts passes to a reader or reads off env.
    const source = readFileSync(new URL('../../src/config.ts', import.meta.url), 'utf8');
    const named = [...source.matchAll(/\benv(?:\.([A-Z][A-Z0-9_]+)|, '([A-Z][A-Z0-9_]+)')/g)].map((match) => match[1] ?? match[2]!);
    assert.ok(named.length >= 30, `only ${named.length} reads found`);
    for (const name of named) assert.ok(read.has(name), `config.ts reads ${name}, SETTINGS does not name it`);
  });

  test('the environment loadConfig reads refuses a name SETTINGS does not declare (so none can be missing from --help)', () => {
    const env = declaredOnly({ PORT: '5001', UNDECLARED_SETTING: 'x' });
    assert.equal(env.PORT, '5001');
    assert.throws(() => env.UNDECLARED_SETTING, /config\.ts reads UNDECLARED_SETTING, which SETTINGS does not declare/);
  });

  test('every default SETTINGS gives (and --help shows) is the real one: setting it to that value changes nothing', () => {
    const defaults = SETTINGS.filter((setting) => setting.default !== undefined);
    assert.ok(defaults.length >= 25);
    for (const { name, default: value } of defaults) assert.deepEqual(loadConfig({ [name]: value! }), loadConfig({}), `${name}=${value} is not the default`);
  });
});

describe('SMTP_URL and MAIL_FROM', () => {
  test('unset: no mail; set: the URL as given and MAIL_FROM, by default gatehouse@ the host of PUBLIC_URL', () => {
    assert.equal(loadConfig({}).mail, null);
    const url = 'smtps://mailer:s3cret@mail.example.com:465';
    assert.deepEqual(loadConfig({ SMTP_URL: url, PUBLIC_URL: 'https://id.example.com' }).mail, { smtpUrl: url, from: 'Gatehouse <gatehouse@id.example.com>' });
    assert.equal(loadConfig({ SMTP_URL: 'smtp://127.0.0.1:2525', MAIL_FROM: 'Accounts <accounts@example.com>' }).mail?.from, 'Accounts <accounts@example.com>');
    assert.equal(loadConfig({ SMTP_URL: 'smtp://127.0.0.1:2525', MAIL_FROM: 'accounts@example.com' }).mail?.from, 'accounts@example.com');
  });

  test('a bad value stops start-up naming it, never repeating the SMTP password', () => {
    for (const SMTP_URL of ['http://mail.example.com', 'mail.example.com', 'smtp://', 'smtps://user:pa ss@']) {
      refuses({ SMTP_URL }, 'SMTP_URL');
      assert.throws(
        () => loadConfig({ SMTP_URL }),
        (error: Error) => !error.message.includes('pa ss'),
      );
    }
    for (const MAIL_FROM of ['no address', 'Name <a@b', 'a@b>', 'x\r\nBcc: victim@example.com <a@b.c>'])
      refuses({ SMTP_URL: 'smtp://127.0.0.1', MAIL_FROM }, 'MAIL_FROM');
    refuses({ MAIL_FROM: 'a@example.com' }, 'SMTP_URL');
  });
});
