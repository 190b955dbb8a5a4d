/**
 * DPoP (SPEC §4.14, RFC 9449): the key a token is bound to, as the RFC 7638 thumbprint of the
 * client's public key (`dpop_jkt`), and who must bind their tokens.
 * - `access_tokens.dpop_jkt`: the key every use of the token must prove; null for a bearer token.
 * - `refresh_tokens.dpop_jkt`: a public client's refresh token is bound too (RFC 9449 §5), and
 *   each successor keeps its predecessor's key; null for a confidential client's.
 * - `auth_codes.dpop_jkt`: the `dpop_jkt` of the authorization request, which the exchange must prove.
 * - `clients.require_dpop`, `resources.require_dpop`: 1 when no token is issued without a proof.
 * Rows made before are unbound, as they were. Frozen in time.
 */
import type { Kysely } from 'kysely';

const BOUND = ['access_tokens', 'refresh_tokens', 'auth_codes'] as const;
const REQUIRING = ['clients', 'resources'] as const;

export async function up(db: Kysely<any>): Promise<void> {
  for (const table of BOUND) await db.schema.alterTable(table).addColumn('dpop_jkt', 'text').execute();
  for (const table of REQUIRING)
    await db.schema
      .alterTable(table)
      .addColumn('require_dpop', 'integer', (c) => c.notNull().defaultTo(0))
      .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const table of REQUIRING) await db.schema.alterTable(table).dropColumn('require_dpop').execute();
  for (const table of BOUND) await db.schema.alterTable(table).dropColumn('dpop_jkt').execute();
}
