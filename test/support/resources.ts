/** Registering resource servers in a test server, as the CLI and the admin pages do. */
import { COMMAND_LINE } from '../../src/audit.ts';
import { registerResource, type ScopeInput } from '../../src/clients/resources.ts';
import { discover, type App } from './oauth-client.ts';
import type { TestServer } from './server.ts';

export interface ResourceServer {
  uri: string;
  /** Its own introspection client, as an oauth4webapi client. */
  introspector: App;
  /** That client's secret. */
  secret: string;
}

export async function registerResourceServer(server: TestServer, uri: string, scopes: ScopeInput[], name = 'Files API'): Promise<ResourceServer> {
  const { resource, secret } = await registerResource(server.app.gatehouse, { uri, name, scopes }, COMMAND_LINE);
  return { uri: resource.uri, introspector: await discover(server, resource.client_id!, { secret }), secret };
}
