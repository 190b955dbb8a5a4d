/** A WebSocket client (the `ws` package, which can send an Authorization header). */
import WebSocket from 'ws';

export interface Connection {
  socket: WebSocket;
  /** Resolves with the close code when the server closes the socket. */
  closed: Promise<number>;
  /** Sends a JSON message and resolves with the next JSON message received. */
  ask(message: unknown): Promise<Record<string, unknown>>;
}

/**
 * Opens /ws; resolves once open, rejects with the HTTP status when the upgrade is refused.
 * `dpop`: the token sent as `Authorization: DPoP` with this proof (in the header only).
 */
export function connect(baseUrl: string, token: string, via: 'header' | 'query' = 'header', dpop?: string): Promise<Connection> {
  const url = new URL('/ws', baseUrl.replace(/^http/, 'ws'));
  if (via === 'query') url.searchParams.set('access_token', token);
  const headers = dpop === undefined ? { authorization: `Bearer ${token}` } : { authorization: `DPoP ${token}`, dpop };
  const socket = new WebSocket(url, via === 'header' ? { headers } : {});
  const closed = new Promise<number>((resolve) => socket.once('close', (code) => resolve(code)));
  return new Promise((resolve, reject) => {
    socket.once('unexpected-response', (_request, response) =>
      reject(Object.assign(new Error(`upgrade refused: ${response.statusCode}`), { status: response.statusCode, headers: response.headers })),
    );
    socket.once('error', reject);
    socket.once('open', () =>
      resolve({
        socket,
        closed,
        ask: (message) =>
          new Promise((answer) => {
            socket.once('message', (data) => answer(JSON.parse(String(data)) as Record<string, unknown>));
            socket.send(JSON.stringify(message));
          }),
      }),
    );
  });
}

/** Milliseconds until `closed` resolves, or rejects after `limitMs`. */
export async function timeToClose(connection: Connection, limitMs: number): Promise<{ code: number; ms: number }> {
  const start = performance.now();
  let timer: NodeJS.Timeout | undefined;
  const code = await Promise.race([
    connection.closed,
    new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`socket still open after ${limitMs} ms`)), limitMs))),
  ]).finally(() => clearTimeout(timer));
  return { code, ms: performance.now() - start };
}
