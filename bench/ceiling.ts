/**
 * The ceiling for `npm run bench`: the bare Node `http` server answering a tiny JSON body,
 * in a process of its own. Gatehouse's phases are reported as fractions of its throughput.
 * Usage: node bench/ceiling.ts <port>
 */
import { createServer } from 'node:http';

const body = JSON.stringify({ status: 'okay' });
const port = Number(process.argv[2] ?? 0);

const server = createServer((request, response) => {
  request.resume(); // drain any body, as a real server must
  response.writeHead(200, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(body) });
  response.end(body);
});
server.listen(port, '127.0.0.1');
process.once('SIGTERM', () => {
  server.close(() => process.exit(0));
  server.closeAllConnections();
});
