/**
 * A throw-away certificate authority for suites that serve https (client ID metadata
 * documents, and later MCP servers). Node reads NODE_EXTRA_CA_CERTS only when a process
 * starts, so test/run.ts makes the CA once (`createTestCa`) before starting the test
 * runner, points NODE_EXTRA_CA_CERTS at it, and passes its folder in GATEHOUSE_TEST_CA_DIR;
 * suites then sign server certificates with it (`serverCertificate`). Outbound HTTPS in
 * Gatehouse therefore trusts these servers exactly as it would trust a real one: through
 * the system store plus NODE_EXTRA_CA_CERTS, with no test-only switch in the code.
 * Uses the openssl command-line tool.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const CA_KEY = 'ca.key';
export const CA_CERT = 'ca.crt';
const EC_KEY = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'];

function openssl(args: string[], cwd: string): void {
  execFileSync('openssl', args, { cwd, stdio: ['ignore', 'ignore', 'pipe'] });
}

/** Why no CA can be made here (no openssl), or null. */
export function opensslProblem(): string | null {
  try {
    execFileSync('openssl', ['version'], { stdio: 'ignore' });
    return null;
  } catch {
    return 'the openssl command is missing (install it with: apt-get install -y openssl)';
  }
}

/** Makes a CA key and self-signed certificate in `dir`, valid for two days. */
export function createTestCa(dir: string): void {
  openssl(
    [
      'req',
      '-x509',
      ...EC_KEY,
      '-keyout',
      CA_KEY,
      '-out',
      CA_CERT,
      '-days',
      '2',
      '-subj',
      '/CN=Gatehouse test CA',
      '-addext',
      'basicConstraints=critical,CA:TRUE',
      '-addext',
      'keyUsage=critical,keyCertSign,cRLSign',
    ],
    dir,
  );
}

/** Why suites cannot sign server certificates (not started through test/run.ts), or null. */
export function testCaProblem(): string | null {
  return process.env.GATEHOUSE_TEST_CA_DIR ? null : 'no test CA: run this suite through test/run.ts (npm test), which makes one';
}

/**
 * A key and certificate for a server known by `names` (host names and IP addresses),
 * signed by the test CA, valid for a day.
 */
export function serverCertificate(names: readonly string[]): { key: string; cert: string } {
  const caDir = process.env.GATEHOUSE_TEST_CA_DIR;
  if (!caDir) throw new Error(testCaProblem()!);
  const dir = mkdtempSync(join(tmpdir(), 'gatehouse-cert-'));
  try {
    const altNames = names.map((name) => (/^[\d.]+$|:/.test(name) ? `IP:${name}` : `DNS:${name}`)).join(',');
    writeFileSync(join(dir, 'ext.cnf'), `subjectAltName=${altNames}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n`);
    openssl(['req', '-new', ...EC_KEY, '-keyout', 'server.key', '-out', 'server.csr', '-subj', `/CN=${names[0]}`], dir);
    openssl(
      [
        'x509',
        '-req',
        '-in',
        'server.csr',
        '-CA',
        join(caDir, CA_CERT),
        '-CAkey',
        join(caDir, CA_KEY),
        '-set_serial',
        `0x${randomBytes(8).toString('hex')}`,
        '-days',
        '1',
        '-extfile',
        'ext.cnf',
        '-out',
        'server.crt',
      ],
      dir,
    );
    return { key: readFileSync(join(dir, 'server.key'), 'utf8'), cert: readFileSync(join(dir, 'server.crt'), 'utf8') };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
