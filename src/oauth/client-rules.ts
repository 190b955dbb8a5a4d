/**
 * What a client must do on its requests, from its own settings, its profile and the server's
 * (SPEC §4.14): the one place each rule is decided, for the authorization endpoint, PAR and
 * the token endpoint alike. The FAPI 2.0 Security Profile (`--profile fapi2`) switches on
 * PAR, PKCE and DPoP, and keeps its codes short; that the client is confidential with
 * `private_key_jwt` is checked when it is registered (clients/clients.ts).
 */
import type { Config } from '../config.ts';
import type { Client } from '../store/schema.ts';

/** The FAPI 2.0 Security Profile's name in `--profile` and `clients.profile`. */
export const FAPI2 = 'fapi2';

/** FAPI 2.0 Security Profile §5.3.2.1: authorization codes live at most 60 seconds. */
const FAPI2_CODE_SECONDS = 60;

type Rules = Pick<Client, 'require_pkce' | 'require_dpop' | 'require_par' | 'profile'>;

export function mustUsePkce(client: Rules, config: Pick<Config, 'requirePkce'>): boolean {
  return config.requirePkce || client.require_pkce === 1 || client.profile === FAPI2;
}

export function mustPushRequests(client: Rules, config: Pick<Config, 'requirePar'>): boolean {
  return config.requirePar || client.require_par === 1 || client.profile === FAPI2;
}

export function mustProveKey(client: Rules): boolean {
  return client.require_dpop === 1 || client.profile === FAPI2;
}

/** How long the client's authorization codes live, in seconds. */
export function codeLifetime(client: Rules, config: Pick<Config, 'authCodeTtl'>): number {
  return client.profile === FAPI2 ? Math.min(config.authCodeTtl, FAPI2_CODE_SECONDS) : config.authCodeTtl;
}
