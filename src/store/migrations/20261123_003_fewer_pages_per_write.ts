/**
 * Fewer B-tree pages written per token operation (issue 14). Frozen in time: it must not
 * import application types.
 *
 * SQLite: `audit_events` loses AUTOINCREMENT, which wrote `sqlite_sequence` with every event: its
 * ids still only grow (SQLite takes the largest id + 1, and the purge deletes the oldest
 * events, never the newest), except that an emptied table would start again from 1.
 *
 * Both backends: the audit trail's indexes are the ones its readers use. The list is read
 * newest first by id, so each filter's index is (column, id), which hands the rows over in
 * that order instead of sorting every match; the filters on who (user, actor, client)
 * compare with `=`, so their indexes leave out the NULLs (most events have no actor). The
 * purge deletes by `expires_at`; nothing reads by `at`, so its index goes.
 *
 * The tables keyed by a hash or a UUID stay rowid tables. As WITHOUT ROWID tables (rows
 * stored in their primary key's B-tree) they saved under one page per write, and cost more
 * CPU than they saved: a random hash as the key of a row that grows (a refresh token takes
 * its sealed successor pair at rotation) splits pages where the rowid table appends, and
 * every secondary index carries the whole key (docs/performance.md: code exchange and
 * refresh 20-30 % more CPU per request, interleaved).
 *
 * SQLite rebuilds a table as its documentation says (lang_altertable.html §7): foreign keys
 * off, outside the transaction (dropping a parent table with them on would first delete
 * its rows, and the deletion would cascade into its children's); then, in one transaction,
 * create each new table, copy, drop the old one, rename, recreate its indexes, and check
 * every foreign key before committing. Kysely runs SQLite migrations outside a
 * transaction, so this migration makes its own. The table is rebuilt from its own
 * definition in `sqlite_schema`, so that nothing about it but AUTOINCREMENT changes, and is
 * left alone when it has none: run twice (a crash between the commit and Kysely's record of
 * the migration), it changes nothing more.
 */
import { PostgresAdapter, sql, type Kysely } from 'kysely';

interface Index {
  name: string;
  table: string;
  columns: string[];
  /** Leave out the rows where this column is NULL. */
  notNull?: string;
}

/** The indexes this migration replaces, as they were. */
const BEFORE: Index[] = [
  { name: 'audit_events_at', table: 'audit_events', columns: ['at'] },
  ...['user_id', 'actor_id', 'client_id', 'type'].map((column) => ({ name: `audit_events_${column}`, table: 'audit_events', columns: [column, 'at'] })),
  { name: 'auth_codes_grant_id', table: 'auth_codes', columns: ['grant_id'] },
  { name: 'device_codes_user_id', table: 'device_codes', columns: ['user_id'] },
];

/**
 * What replaces them. A code's grant and a device request's user are NULL until the code
 * is exchanged or the request answered, and are looked up by `=` only (the foreign keys'
 * cascades, voiding a user's requests), so their indexes too leave out the NULLs.
 */
const AFTER: Index[] = [
  ...['user_id', 'actor_id', 'client_id'].map((column) => ({
    name: `audit_events_${column}`,
    table: 'audit_events',
    columns: [column, 'id'],
    notNull: column,
  })),
  { name: 'audit_events_type', table: 'audit_events', columns: ['type', 'id'] },
  { name: 'auth_codes_grant_id', table: 'auth_codes', columns: ['grant_id'], notNull: 'grant_id' },
  { name: 'device_codes_user_id', table: 'device_codes', columns: ['user_id'], notNull: 'user_id' },
];

export async function up(db: Kysely<any>): Promise<void> {
  await change(db, BEFORE, AFTER, (definition) => (/ autoincrement/i.test(definition) ? definition.replace(/ autoincrement/i, '') : null));
}

export async function down(db: Kysely<any>): Promise<void> {
  await change(db, AFTER, BEFORE, (definition) =>
    / autoincrement/i.test(definition) ? null : definition.replace(/("id" integer primary key)/i, '$1 autoincrement'),
  );
}

/**
 * Replaces the indexes `from` with `to`, and on SQLite rebuilds the audit trail with the
 * definition `redefineAudit` gives (null: as it is). The old indexes go first, so that the
 * rebuild does not copy them.
 */
async function change(db: Kysely<any>, from: Index[], to: Index[], redefineAudit: Redefine): Promise<void> {
  const replaceIndexes = async (executor: Kysely<any>, between: () => Promise<void>) => {
    for (const index of from) await executor.schema.dropIndex(index.name).ifExists().execute();
    await between();
    for (const { name, table, columns, notNull } of to) {
      const index = executor.schema.createIndex(name).on(table).columns(columns);
      await (notNull ? index.where(sql.ref(notNull), 'is not', null) : index).execute();
    }
  };
  if (db.getExecutor().adapter instanceof PostgresAdapter) return replaceIndexes(db, async () => {});
  await inTransactionWithForeignKeysOff(db, (trx) => replaceIndexes(trx, () => rebuild(trx, 'audit_events', redefineAudit)));
}

type Redefine = (definition: string) => string | null;

/** Runs `change` in one transaction with foreign keys off, then checks every foreign key before committing. */
async function inTransactionWithForeignKeysOff(db: Kysely<any>, change: (trx: Kysely<any>) => Promise<void>): Promise<void> {
  await sql`pragma foreign_keys = off`.execute(db);
  try {
    // The pragma is silently ignored inside a transaction: make sure it took.
    const { rows } = await sql<{ foreign_keys: number }>`pragma foreign_keys`.execute(db);
    if (rows[0]?.foreign_keys !== 0) throw new Error('could not turn foreign keys off for the table rebuild');
    await db.transaction().execute(async (trx) => {
      await change(trx);
      const problems = await sql`pragma foreign_key_check`.execute(trx);
      if (problems.rows.length > 0)
        throw new Error(`the rebuilt tables break ${problems.rows.length} foreign keys: ${JSON.stringify(problems.rows.slice(0, 5))}`);
    });
  } finally {
    await sql`pragma foreign_keys = on`.execute(db);
  }
}

/**
 * Rebuilds `table` with the definition `redefine` returns for its current one (null: leave
 * it as it is), keeping its rows and its indexes.
 */
async function rebuild(trx: Kysely<any>, table: string, redefine: Redefine): Promise<void> {
  const { rows } = await sql<{ type: string; sql: string | null }>`select type, sql from sqlite_schema where tbl_name = ${table}`.execute(trx);
  const definition = rows.find((row) => row.type === 'table')?.sql;
  if (!definition) throw new Error(`no table ${table}`);
  const redefined = redefine(definition);
  if (redefined === null) return;
  const rebuilt = `${table}_rebuilt`;
  const name = new RegExp(`^create table "?${table}"?`, 'i');
  if (!name.test(redefined)) throw new Error(`unexpected definition of ${table}: ${definition}`);
  await sql.raw(redefined.replace(name, `create table "${rebuilt}"`)).execute(trx);
  await sql`insert into ${sql.table(rebuilt)} select * from ${sql.table(table)}`.execute(trx);
  await sql`drop table ${sql.table(table)}`.execute(trx);
  await sql`alter table ${sql.table(rebuilt)} rename to ${sql.table(table)}`.execute(trx);
  // Explicit indexes only: the automatic ones (primary key, unique) come with the definition.
  for (const index of rows) if (index.type === 'index' && index.sql !== null) await sql.raw(index.sql).execute(trx);
}
