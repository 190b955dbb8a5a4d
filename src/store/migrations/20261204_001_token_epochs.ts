/**
 * `token_epochs`: what lets an instance on PostgreSQL keep the bearer check's answers in memory
 * and still see every revocation at once (bearer-token-cache.ts). 256 rows, one per shard of
 * the grants — a grant's shard is the last two hex digits of its id (`gatehouse_token_shard`),
 * random in a UUIDv7 — each with a counter that grows whenever a grant of its shard stops being
 * usable or its person changes.
 *
 * The database keeps the counters, not the code that revokes: every change the bearer check
 * reads is counted by a trigger, whichever statement makes it.
 * - a grant revoked (`revoked_at` set), or deleted while not revoked nor expired (a cascade):
 *   its shard;
 * - a person disabled or enabled, or renamed (`username`, `display_name`, which the bearer
 *   check returns): every shard, since the person's grants may be in any (and one made at the
 *   same moment must not be missed). Rare: an administrator's or the person's own hand.
 *
 * The counters grow in the revoking transaction, at its commit: each change's row trigger notes
 * the shards in a transaction-local setting, and a deferred trigger, at commit, increments them
 * in ascending order of shard — so two transactions never wait for each other's counters in
 * opposite orders (no deadlock), and hold them only while they commit. A reader that sees the
 * revocation sees the counter grown, and the reverse: they commit together.
 *
 * Created on SQLite too, so that both backends have one schema; its counters stay at zero there,
 * where the bearer check reads the database in process (bearer-token-cache.ts says why).
 * Frozen in time.
 */
import { PostgresAdapter, sql, type Kysely } from 'kysely';

const SHARDS = Array.from({ length: 256 }, (_, n) => n.toString(16).padStart(2, '0'));

export async function up(db: Kysely<any>): Promise<void> {
  const postgres = db.getExecutor().adapter instanceof PostgresAdapter;
  await db.schema
    .createTable('token_epochs')
    .addColumn('shard', 'text', (c) => c.primaryKey())
    .addColumn('epoch', 'bigint', (c) => c.notNull().defaultTo(0))
    // Room on each page for a counter's next versions: its updates stay on its page (HOT),
    // and the page is pruned as it fills, with no index entry or vacuum for each.
    .$call((table) => (postgres ? table.modifyEnd(sql`with (fillfactor = 10)`) : table))
    .execute();
  await db
    .insertInto('token_epochs')
    .values(SHARDS.map((shard) => ({ shard })))
    .execute();
  if (!postgres) return;
  await sql`
    create function gatehouse_token_shard(grant_id text) returns text
    language sql immutable parallel safe as $$ select right(grant_id, 2) $$`.execute(db);
  // The shards this transaction changed, space-separated (two hex digits each, so a shard is
  // found by `position`), each once; '*' for all of them.
  await sql`
    create function gatehouse_note_grant_change() returns trigger language plpgsql as $$
    declare
      changed text := gatehouse_token_shard(old.id);
      noted text := coalesce(current_setting('gatehouse.token_shards', true), '');
    begin
      if noted = '' then perform set_config('gatehouse.token_shards', changed, true);
      elsif noted <> '*' and position(changed in noted) = 0 then perform set_config('gatehouse.token_shards', noted || ' ' || changed, true);
      end if;
      return null;
    end $$`.execute(db);
  await sql`
    create function gatehouse_note_user_change() returns trigger language plpgsql as $$
    begin
      perform set_config('gatehouse.token_shards', '*', true);
      return null;
    end $$`.execute(db);
  // Deferred: runs at commit, once per changed row; the first does the work. Several shards are
  // locked in order of shard first; a single one (a revocation's usual case) needs no order.
  await sql`
    create function gatehouse_count_token_changes() returns trigger language plpgsql as $$
    declare
      noted text := coalesce(current_setting('gatehouse.token_shards', true), '');
    begin
      if noted = '' then return null; end if;
      perform set_config('gatehouse.token_shards', '', true);
      if noted = '*' then
        perform from token_epochs order by shard for update;
        update token_epochs set epoch = epoch + 1;
      elsif length(noted) = 2 then
        update token_epochs set epoch = epoch + 1 where shard = noted;
      else
        perform from token_epochs where shard = any(string_to_array(noted, ' ')) order by shard for update;
        update token_epochs set epoch = epoch + 1 where shard = any(string_to_array(noted, ' '));
      end if;
      return null;
    end $$`.execute(db);
  // Each change is noted at once and counted at commit: a trigger of each kind per event. For
  // one event PostgreSQL runs AFTER triggers in the order of their names: the note's sorts first,
  // so that even a count made at once (SET CONSTRAINTS … IMMEDIATE) comes after its note.
  const whenRevoked = sql`old.revoked_at is null and new.revoked_at is not null`;
  // Not a grant already past its expiry — a purge's whole work —, whose tokens expired with it
  // (a grant lives as long as its newest token) and which kept answers refuse by their own expiry.
  const whenDeletedLive = sql`old.revoked_at is null and old.expires_at > (extract(epoch from statement_timestamp()) * 1000)::bigint`;
  const whenUserChanged = sql`old.disabled is distinct from new.disabled or old.username is distinct from new.username
    or old.display_name is distinct from new.display_name`;
  const events = [
    { name: 'grant_revoked', on: sql`update of revoked_at on grants`, when: whenRevoked, note: sql`gatehouse_note_grant_change` },
    { name: 'grant_deleted', on: sql`delete on grants`, when: whenDeletedLive, note: sql`gatehouse_note_grant_change` },
    { name: 'user_changed', on: sql`update of disabled, username, display_name on users`, when: whenUserChanged, note: sql`gatehouse_note_user_change` },
  ];
  for (const { name, on, when, note } of events) {
    await sql`create trigger ${sql.raw(`token_epochs_1_note_${name}`)} after ${on} for each row when (${when}) execute function ${note}()`.execute(db);
    await sql`create constraint trigger ${sql.raw(`token_epochs_2_count_${name}`)} after ${on} deferrable initially deferred
      for each row when (${when}) execute function gatehouse_count_token_changes()`.execute(db);
  }
}

export async function down(db: Kysely<any>): Promise<void> {
  if (db.getExecutor().adapter instanceof PostgresAdapter) {
    for (const [name, table] of [
      ['grant_revoked', 'grants'],
      ['grant_deleted', 'grants'],
      ['user_changed', 'users'],
    ]) {
      await sql`drop trigger ${sql.raw(`token_epochs_2_count_${name}`)} on ${sql.table(table!)}`.execute(db);
      await sql`drop trigger ${sql.raw(`token_epochs_1_note_${name}`)} on ${sql.table(table!)}`.execute(db);
    }
    await sql`drop function gatehouse_count_token_changes()`.execute(db);
    await sql`drop function gatehouse_note_user_change()`.execute(db);
    await sql`drop function gatehouse_note_grant_change()`.execute(db);
    await sql`drop function gatehouse_token_shard(text)`.execute(db);
  }
  await db.schema.dropTable('token_epochs').execute();
}
