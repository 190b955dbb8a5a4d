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
import {
  PostgresAdapter,
  sql,
  type AliasedRawBuilder,
  type Expression,
  type ExpressionBuilder,
  type Kysely,
  type QueryCreator,
  type SelectQueryBuilder,
  type SqlBool,
  type Transaction,
} from 'kysely';
import { inGroupCommit } from './group-commit.ts';
import type { Database } from './schema.ts';

/** A condition a step waits on; none (SQLite, or the first step) means the step runs as written. */
export type Gate = Expression<SqlBool> | undefined;

/** The steps a statement has so far, by name: its CTEs, not the tables they write. */
type StepName<DB> = Exclude<keyof DB, keyof Database> & string;

/**
 * True when `step`, written before in the same statement, changed (or returned) at least
 * one row. `steps` is the query creator the gated step is written with: it is taken for its
 * type, which knows the steps before it, so that a gate names a step that exists.
 */
export function after<DB>(steps: QueryCreator<DB>, step: StepName<DB>): Expression<SqlBool> {
  return sql<SqlBool>`exists (select 1 from ${sql.table(step)})`;
}

/**
 * The SELECT that ends such a statement: how many rows each of `names` changed, under the
 * step's name. `steps`, the expression builder of that SELECT, is taken for its type, like
 * `after`'s: a name that is not a step of the statement does not compile.
 */
export function rowCounts<DB, S extends StepName<DB>>(steps: ExpressionBuilder<DB, never>, names: readonly S[]): AliasedRawBuilder<number, S>[] {
  return names.map((step) => sql<number>`(select count(*) from ${sql.table(step)})`.as(step));
}

/** The SELECT of an INSERT … SELECT, with the gate as its WHERE. */
export function gated<DB, TB extends keyof DB, O>(query: SelectQueryBuilder<DB, TB, O>, gate: Gate): SelectQueryBuilder<DB, TB, O> {
  return gate === undefined ? query : query.where(gate);
}

/** Epoch milliseconds (or NULL) as the parameter of an INSERT … SELECT: PostgreSQL takes an untyped parameter there for text. */
export function bigint<DB, TB extends keyof DB, V extends number | null>(eb: ExpressionBuilder<DB, TB>, value: V) {
  return eb.cast<V>(eb.val(value), 'bigint');
}

export function onPostgres(db: Kysely<Database>): boolean {
  return db.getExecutor().adapter instanceof PostgresAdapter;
}

/** Thrown inside a SQLite transaction to roll it back when a step lost its race. */
class LostRace extends Error {
  readonly step: string;
  constructor(step: string) {
    super(step);
    this.step = step;
  }
}

/**
 * A SQLite step: a write whose outcome does not matter, or a deciding one that must change
 * exactly one row — it stands for the statement's step `decides`, and loses as that one does.
 */
export type SqliteStep<S extends string> =
  ((trx: Transaction<Database>) => Promise<unknown>) | { write: (trx: Transaction<Database>) => Promise<bigint>; decides: S };

/** What a statement's final SELECT (`rowCounts`) returns: the rows each deciding step changed. */
export type StepCounts<S extends string> = { readonly [K in S]: number };

export interface ChainedWrites<S extends string, L extends string> {
  /**
   * The deciding steps by name, in the order the statement runs them, each with the outcome
   * when it found nothing: the first such names the outcome. The names are those of the
   * statement's result, so a name that is not a step of it does not compile.
   */
  decidedBy: { readonly [K in S]: L };
  /** PostgreSQL: runs the one statement, which selects the row counts of its deciding steps by their names (`rowCounts`). */
  statement: () => Promise<StepCounts<NoInfer<S>> | undefined>;
  /** SQLite: the writes, in order, in one transaction. */
  steps: readonly SqliteStep<NoInfer<S>>[];
}

/**
 * Runs writes that go together on either backend: `won` when every deciding step found its
 * row, or the first that did not's outcome — and then nothing is stored.
 */
export async function writeTogether<W extends string, S extends string, L extends string>(
  db: Kysely<Database>,
  won: W,
  writes: ChainedWrites<S, L>,
): Promise<W | L> {
  if (onPostgres(db)) {
    const counts = await writes.statement();
    const decisions = Object.entries(writes.decidedBy) as [S, L][];
    return decisions.find(([step]) => !counts?.[step])?.[1] ?? won;
  }
  try {
    await inGroupCommit(db, 'bounded', async (trx) => {
      for (const step of writes.steps) {
        if (typeof step === 'function') await step(trx);
        else if ((await step.write(trx)) !== 1n) throw new LostRace(step.decides);
      }
    });
    return won;
  } catch (error) {
    if (error instanceof LostRace) return writes.decidedBy[error.step as S];
    throw error;
  }
}
