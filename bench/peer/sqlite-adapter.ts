/**
 * A durable adapter for the bench's peer, in the shape oidc-provider's example SQL adapters
 * use: one table per model, the payload as JSON, and the columns the adapter interface looks
 * up by (grant id, user code, session uid) beside it, each with an index only in the models
 * that are looked up by it. Same settings as Gatehouse's own SQLite (src/store/database.ts):
 * WAL, synchronous=NORMAL. Every call is one autocommitted statement.
 */
import { DatabaseSync } from 'node:sqlite';
import type { Adapter, AdapterPayload } from 'oidc-provider';

/** The models whose rows carry a grant id, revoked together by `revokeByGrantId`. */
const GRANTABLE = new Set(['AccessToken', 'AuthorizationCode', 'RefreshToken', 'DeviceCode', 'BackchannelAuthenticationRequest', 'PreAuthorizedCode']);

const now = () => Math.floor(Date.now() / 1000);

interface Row {
  payload: string;
  expires_at: number | null;
  consumed_at: number | null;
}

export function sqliteAdapter(file: string): new (model: string) => Adapter {
  const database = new DatabaseSync(file);
  database.exec('PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;');

  return class SqliteAdapter implements Adapter {
    readonly #upsert;
    readonly #find;
    readonly #findByUserCode;
    readonly #findByUid;
    readonly #consume;
    readonly #destroy;
    readonly #revokeByGrantId;

    constructor(model: string) {
      const table = `"${model}"`;
      database.exec(
        `create table if not exists ${table} (id text primary key, payload text not null, grant_id text, user_code text, uid text, expires_at integer, consumed_at integer)`,
      );
      if (GRANTABLE.has(model)) database.exec(`create index if not exists "${model}_grant_id" on ${table} (grant_id)`);
      if (model === 'DeviceCode') database.exec(`create unique index if not exists "${model}_user_code" on ${table} (user_code)`);
      if (model === 'Session') database.exec(`create unique index if not exists "${model}_uid" on ${table} (uid)`);
      this.#upsert = database.prepare(
        `insert into ${table} (id, payload, grant_id, user_code, uid, expires_at) values (?, ?, ?, ?, ?, ?)
         on conflict (id) do update set payload = excluded.payload, grant_id = excluded.grant_id, user_code = excluded.user_code, uid = excluded.uid, expires_at = excluded.expires_at`,
      );
      const columns = 'payload, expires_at, consumed_at';
      this.#find = database.prepare(`select ${columns} from ${table} where id = ?`);
      this.#findByUserCode = model === 'DeviceCode' ? database.prepare(`select ${columns} from ${table} where user_code = ?`) : null;
      this.#findByUid = model === 'Session' ? database.prepare(`select ${columns} from ${table} where uid = ?`) : null;
      this.#consume = database.prepare(`update ${table} set consumed_at = ? where id = ?`);
      this.#destroy = database.prepare(`delete from ${table} where id = ?`);
      this.#revokeByGrantId = GRANTABLE.has(model) ? database.prepare(`delete from ${table} where grant_id = ?`) : null;
    }

    static #payload(row: Row | undefined): AdapterPayload | undefined {
      if (row === undefined || (row.expires_at !== null && row.expires_at <= now())) return undefined;
      const payload = JSON.parse(row.payload) as AdapterPayload;
      return row.consumed_at === null ? payload : { ...payload, consumed: row.consumed_at };
    }

    async upsert(id: string, payload: AdapterPayload, expiresIn: number): Promise<void> {
      const expiresAt = typeof expiresIn === 'number' ? now() + expiresIn : null;
      this.#upsert.run(id, JSON.stringify(payload), payload.grantId ?? null, payload.userCode ?? null, payload.uid ?? null, expiresAt);
    }

    async find(id: string) {
      return SqliteAdapter.#payload(this.#find.get(id) as Row | undefined);
    }

    async findByUserCode(userCode: string) {
      return SqliteAdapter.#payload(this.#findByUserCode?.get(userCode) as Row | undefined);
    }

    async findByUid(uid: string) {
      return SqliteAdapter.#payload(this.#findByUid?.get(uid) as Row | undefined);
    }

    async consume(id: string): Promise<void> {
      this.#consume.run(now(), id);
    }

    async destroy(id: string): Promise<void> {
      this.#destroy.run(id);
    }

    async revokeByGrantId(grantId: string): Promise<void> {
      this.#revokeByGrantId?.run(grantId);
    }
  };
}
