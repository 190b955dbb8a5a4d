/**
 * One client ID metadata document (SPEC §4.8) served over https with a certificate from the
 * test CA (./tls.ts), for suites that need a client of that kind in a real flow. The server
 * under test must run with CLIENT_METADATA_ALLOW_PRIVATE_ADDRESSES=true: it is on 127.0.0.1.
 * Its redirect URL is loopback, so any port of http://127.0.0.1/callback is accepted.
 */
import type { Server, ServerResponse } from 'node:http';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { serverCertificate } from './tls.ts';

export interface MetadataDocument {
  /** The document's URL: the client's ID. */
  url: string;
  close(): void;
}

/** `extra`: more fields of the document (say, its OpenID Connect settings). */
export async function serveMetadataDocument(name: string, path = '/apps/client.json', extra: Record<string, unknown> = {}): Promise<MetadataDocument> {
  let url = '';
  const server = createServer(serverCertificate(['127.0.0.1']), (_request, response) => {
    const document = { client_id: url, client_name: name, redirect_uris: ['http://127.0.0.1/callback'], token_endpoint_auth_method: 'none', ...extra };
    response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(document));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `https://127.0.0.1:${(server.address() as AddressInfo).port}${path}`;
  return { url, close: () => server.close() };
}

/** An https server for metadata documents: path → what to answer, changeable during a test. */
export async function documentServer(name = 'Notes CLI') {
  const documents = new Map<string, (res: ServerResponse) => void>();
  const server: Server = createServer(serverCertificate(['127.0.0.1']), (req, res) => {
    const answer = documents.get(new URL(req.url!, 'https://x').pathname);
    if (answer) answer(res);
    else res.writeHead(404).end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const origin = `https://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    origin,
    server,
    /** Serves a document at `path` (its own URL as client_id unless `fields` says otherwise); returns that URL. */
    serve(path: string, fields: object = {}, cacheControl = 'max-age=0') {
      const url = `${origin}${path}`;
      const body = JSON.stringify({
        client_id: url,
        client_name: name,
        redirect_uris: ['http://127.0.0.1/callback'],
        token_endpoint_auth_method: 'none',
        ...fields,
      });
      documents.set(path, (res) => res.writeHead(200, { 'content-type': 'application/json', 'cache-control': cacheControl }).end(body));
      return url;
    },
  };
}
