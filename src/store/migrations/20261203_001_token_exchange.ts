/**
 * Token exchange (SPEC §4.15, RFC 8693).
 * - `clients.token_exchange`: 1 when an administrator allowed the client to exchange a
 *   person's access token for a narrower one (`--token-exchange`).
 * - `clients.id_jag_audiences`: the authorization servers this client may get ID-JAGs for, a
 *   JSON array of `{"issuer": <url>, "client_id": <its client ID there, or null: this one>}`.
 * - `access_tokens.act`: who acts for the person (RFC 8693 §4.1), as JSON, for a token made by
 *   an exchange; null for every other token.
 * Frozen in time.
 */
import type { Kysely } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .alterTable('clients')
    .addColumn('token_exchange', 'integer', (c) => c.notNull().defaultTo(0))
    .execute();
  await db.schema
    .alterTable('clients')
    .addColumn('id_jag_audiences', 'text', (c) => c.notNull().defaultTo('[]'))
    .execute();
  await db.schema.alterTable('access_tokens').addColumn('act', 'text').execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('access_tokens').dropColumn('act').execute();
  await db.schema.alterTable('clients').dropColumn('id_jag_audiences').execute();
  await db.schema.alterTable('clients').dropColumn('token_exchange').execute();
}
