/** Consents: the scopes a user has approved for a client, remembered until they expire. */
import type { Kysely } from 'kysely';
import { prepare } from './prepared.ts';
import type { Database } from './schema.ts';

const consentScopes = prepare((db, p: { userId: string; clientId: string; now: number }) =>
  db.selectFrom('consents').select('scopes').where('user_id', '=', p.userId).where('client_id', '=', p.clientId).where('expires_at', '>', p.now),
);

export async function findConsentScopes(db: Kysely<Database>, userId: string, clientId: string, now: number): Promise<string | undefined> {
  const row = await consentScopes.first(db, { userId, clientId, now });
  return row?.scopes;
}

export async function saveConsent(db: Kysely<Database>, consent: { userId: string; clientId: string; scopes: string; now: number; expiresAt: number }): Promise<void> {
  await db
    .insertInto('consents')
    .values({ user_id: consent.userId, client_id: consent.clientId, scopes: consent.scopes, created_at: consent.now, expires_at: consent.expiresAt })
    .onConflict((oc) => oc.columns(['user_id', 'client_id']).doUpdateSet({ scopes: consent.scopes, created_at: consent.now, expires_at: consent.expiresAt }))
    .execute();
}

export async function deleteConsent(db: Kysely<Database>, userId: string, clientId: string): Promise<void> {
  await db.deleteFrom('consents').where('user_id', '=', userId).where('client_id', '=', clientId).execute();
}
