/**
 * A person's authenticator app, as a test plays it: the secret read off the set-up page
 * (`<code id="totp-secret">`), codes computed with `otpauth` as an app would.
 */
import { Secret, TOTP } from 'otpauth';
import type { UserAgent } from './user-agent.ts';

/** The secret shown on a set-up page, without the spaces it is grouped with. */
export function secretOnPage(html: string): string {
  const shown = /<code id="totp-secret">([^<]*)<\/code>/.exec(html);
  if (!shown) throw new Error('no authenticator app secret on the page');
  return shown[1]!.replace(/\s/g, '');
}

/** The code an app with this secret shows at `at` (epoch ms; default now), `steps` 30-second steps away. */
export function totpCode(secret: string, at = Date.now(), steps = 0): string {
  return new TOTP({ secret: Secret.fromBase32(secret), algorithm: 'SHA1', digits: 6, period: 30 }).generate({ timestamp: at + steps * 30_000 });
}

/**
 * Sets up an app for the person signed in on `agent` (or at the second step of their
 * login), through the set-up page; returns the secret. The code used is the current step's
 * at `at` (the server's clock), so the next step's code (`totpCode(secret, at, 1)`) is still
 * unused: codes of later steps stay valid when the clock crosses a step meanwhile, earlier
 * ones would not.
 */
export async function setUpApp(agent: UserAgent, at = Date.now(), next = '/'): Promise<string> {
  const page = await agent.visit(`/login/second-factor/set-up?${new URLSearchParams({ next })}`);
  const secret = secretOnPage(page.html);
  const done = await agent.submit(page.html, '/login/second-factor/set-up', { code: totpCode(secret, at) });
  if (done.html.includes('id="code-error"')) throw new Error('the set-up refused its code');
  return secret;
}
