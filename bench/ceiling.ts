/**
 * The ceilings for `npm run bench`: a bare Node `http` server, or a bare Fastify server
 * (the framework Gatehouse is built on, no plugins and no hooks), answering a tiny JSON body
 * in a process of its own. Gatehouse's phases are reported as fractions of their throughput.
 * Usage: node bench/ceiling.ts <port> [node|fastify]
 */
import { createServer } from 'node:http';
import Fastify from 'fastify';

const body = { status: 'okay' };
const port = Number(process.argv[2] ?? 0);

async function listen(): Promise<() => Promise<void>> {
  if (process.argv[3] === 'fastify') {
    const app = Fastify({ forceCloseConnections: true });
    app.get('/', async () => body);
    await app.listen({ port, host: '127.0.0.1' });
    return () => app.close();
  }
  const json = JSON.stringify(body);
  const server = createServer((request, response) => {
    request.resume(); // drain any body, as a real server must
    response.writeHead(200, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(json) });
    response.end(json);
  });
  server.listen(port, '127.0.0.1');
  return async () => {
    const closed = new Promise((resolve) => server.close(resolve));
    server.closeAllConnections();
    await closed;
  };
}

const stop = await listen();
process.once('SIGTERM', () => void stop().then(() => process.exit(0)));
