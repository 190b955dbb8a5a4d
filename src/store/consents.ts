/**
 * Consents: the scopes a user has approved for a client on a resource server — for a client
 * no administrator checked, on one redirect origin — remembered until they expire.
 */
import type { Kysely } from 'kysely';
import { prepare } from './prepared.ts';
import type { Database } from './schema.ts';

/** Whose consent, to whom, for which resource server, and for which redirect origin. */
export interface ConsentKey {
  userId: string;
  clientId: string;
  resourceId: string;
  /** '' for an administrator's client; the redirect origin approved for one no administrator checked (SPEC §4.1). */
  redirectOrigin: string;
}

const consentScopes = prepare((db, p: ConsentKey & { now: number }) =>
  db
    .selectFrom('consents')
    .select('scopes')
    .where('user_id', '=', p.userId)
    .where('client_id', '=', p.clientId)
    .where('resource_id', '=', p.resourceId)
    .where('redirect_origin', '=', p.redirectOrigin)
    .where('expires_at', '>', p.now),
);

export async function findConsentScopes(db: Kysely<Database>, key: ConsentKey, now: number): Promise<string | undefined> {
  const row = await consentScopes.first(db, { ...key, now });
  return row?.scopes;
}

export async function saveConsent(db: Kysely<Database>, consent: ConsentKey & { scopes: string; now: number; expiresAt: number }): Promise<void> {
  await db
    .insertInto('consents')
    .values({
      user_id: consent.userId,
      client_id: consent.clientId,
      resource_id: consent.resourceId,
      redirect_origin: consent.redirectOrigin,
      scopes: consent.scopes,
      created_at: consent.now,
      expires_at: consent.expiresAt,
    })
    .onConflict((oc) =>
      oc
        .columns(['user_id', 'client_id', 'resource_id', 'redirect_origin'])
        .doUpdateSet({ scopes: consent.scopes, created_at: consent.now, expires_at: consent.expiresAt }),
    )
    .execute();
}

/** Forgets the user's consents to the client, for every resource server and redirect origin. */
export async function deleteConsent(db: Kysely<Database>, userId: string, clientId: string): Promise<void> {
  await db.deleteFrom('consents').where('user_id', '=', userId).where('client_id', '=', clientId).execute();
}
