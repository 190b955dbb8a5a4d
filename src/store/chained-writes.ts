/**
 * Writes that must happen together, as one round trip on PostgreSQL. SQLite runs such
 * writes as a transaction of small statements in-process, checks what each changed and
 * rolls back when one lost its race. PostgreSQL runs them as one statement of
 * data-modifying CTEs — atomic on its own, so no BEGIN and COMMIT, one round trip — and
 * cannot roll a step back once it ran. So every step there is *gated* on the one before it:
 * an UPDATE by a WHERE, an INSERT … SELECT by the SELECT's WHERE, `exists (select 1 from
 * <earlier step>)`. A step that changes nothing leaves every later one with nothing to do,
 * and the order of the steps is what makes "all or nothing" hold. `writeTogether` runs
 * either form and tells which step, if any, found nothing.
 *
 * What the sub-statements of one such statement see (PostgreSQL, READ COMMITTED):
 * - one snapshot, taken when the statement starts: a step does not see the rows an earlier
 *   step wrote, except through its RETURNING (which the gates read);
 * - an UPDATE or a locking SELECT that meets a row a concurrent transaction changed waits
 *   for that transaction, then re-checks its WHERE against the row's newest version (and
 *   skips it if it no longer matches or is gone) — this, not the snapshot, decides races;
 * - foreign keys are checked at the end of the statement, so a row may reference one a
 *   later step inserts.
 */
import { PostgresAdapter, sql, type Expression, type ExpressionBuilder, type Kysely, type SelectQueryBuilder, type SqlBool, type Transaction } from 'kysely';
import type { Database } from './schema.ts';

/** A condition a step waits on; none (SQLite, or the first step) means the step runs as written. */
export type Gate = Expression<SqlBool> | undefined;

/** True when the step named `cte` of the same statement changed (or returned) at least one row. */
export function after(cte: string): Expression<SqlBool> {
  return sql<SqlBool>`exists (select 1 from ${sql.table(cte)})`;
}

/** The SELECT of an INSERT … SELECT, with the gate as its WHERE. */
export function gated<DB, TB extends keyof DB, O>(query: SelectQueryBuilder<DB, TB, O>, gate: Gate): SelectQueryBuilder<DB, TB, O> {
  return gate === undefined ? query : query.where(gate);
}

/** Epoch milliseconds as the parameter of an INSERT … SELECT: PostgreSQL takes an untyped parameter there for text. */
export function bigint<DB, TB extends keyof DB>(eb: ExpressionBuilder<DB, TB>, value: number) {
  return eb.cast<number>(eb.val(value), 'bigint');
}

export function onPostgres(db: Kysely<Database>): boolean {
  return db.getExecutor().adapter instanceof PostgresAdapter;
}

/** Thrown inside a SQLite transaction to roll it back when a step lost its race. */
class LostRace extends Error {
  readonly outcome: string;
  constructor(outcome: string) {
    super(outcome);
    this.outcome = outcome;
  }
}

/** A SQLite step: a write whose outcome does not matter, or a deciding one that must change exactly one row, else `lost` is the outcome. */
type SqliteStep<L> = ((trx: Transaction<Database>) => Promise<unknown>) | { write: (trx: Transaction<Database>) => Promise<bigint>; lost: L };

export interface ChainedWrites<L> {
  /** PostgreSQL: runs the one statement, which selects the row counts of its deciding steps by their names. */
  statement: () => Promise<Record<string, number | null> | undefined>;
  /** Its deciding steps in order, each with the outcome when it found nothing: the first such names the outcome. */
  decidedBy: readonly (readonly [step: string, lost: L])[];
  /** SQLite: the writes, in order, in one transaction. */
  steps: readonly SqliteStep<L>[];
}

/** Runs writes that go together on either backend: `won` when every deciding step found its row, or the first that did not's outcome — and then nothing is stored. */
export async function writeTogether<W extends string, L extends string>(db: Kysely<Database>, won: W, writes: ChainedWrites<L>): Promise<W | L> {
  if (onPostgres(db)) {
    const counts = await writes.statement();
    return writes.decidedBy.find(([step]) => !counts?.[step])?.[1] ?? won;
  }
  try {
    await db.transaction().execute(async (trx) => {
      for (const step of writes.steps) {
        if (typeof step === 'function') await step(trx);
        else if ((await step.write(trx)) !== 1n) throw new LostRace(step.lost);
      }
    });
    return won;
  } catch (error) {
    if (error instanceof LostRace) return error.outcome as L;
    throw error;
  }
}
