/**
 * The signed-in person's own pages: the applications they authorized (SPEC §4.5), each
 * with **Revoke access** (see src/clients/access.ts).
 */
import type { FastifyInstance } from 'fastify';
import { authorizedApplications, removeAccess } from '../clients/access.ts';
import { listResources, type ResourceView } from '../clients/resources.ts';
import { lookupClient } from '../oauth/client-auth.ts';
import type { AppContext } from '../context.ts';
import { splitScopes } from '../oauth/scopes.ts';
import { PageRefusal } from './errors.ts';
import { requireFormBody } from './helpers.ts';
import { field, formatTime, navigation, page, toLogin } from './pages.ts';
import { cookieOptions, currentUser, formToken, noticeCookieName } from './session.ts';

/** How long the notice of a removal waits for the page it is shown on. */
const NOTICE_TTL = 60;

/** The scopes grouped by the resource server each belongs to, in the servers' order, with their descriptions. */
function resourcesOf(resources: readonly ResourceView[], scopes: readonly string[]) {
  return resources
    .map((resource) => ({
      name: resource.name,
      uri: resource.uri,
      scopes: resource.scopes.filter((s) => scopes.includes(s.name)).map((s) => ({ scope: s.name, description: s.description })),
    }))
    .filter((resource) => resource.scopes.length > 0);
}

export default async function accountRoutes(app: FastifyInstance, { ctx }: { ctx: AppContext }) {
  app.get('/account/applications', page, async (request, reply) => {
    reply.header('Cache-Control', 'no-store');
    const user = await currentUser(request, ctx);
    if (!user) return toLogin(request, reply, '/account/applications');
    navigation(request, reply, user);
    // Scope names are unique across resource servers: each scope says which one the access is to.
    const resources = await listResources(ctx);
    const applications = (await authorizedApplications(ctx, user.id)).map((application) => ({
      clientId: application.client_id,
      name: application.name,
      resources: resourcesOf(resources, splitScopes(application.scopes)),
      authorized: formatTime(application.authorized_at),
      lastUsed: formatTime(application.last_used_at),
    }));
    // The notice comes from this user's own Revoke access in this browser, never from the URL:
    // a link cannot make the page claim a removal. Shown once, and not for an application
    // that is listed again.
    const notice = request.cookies[noticeCookieName(ctx)];
    if (notice !== undefined) reply.clearCookie(noticeCookieName(ctx), cookieOptions(ctx));
    const revokedId = notice?.startsWith(`${user.id} `) ? notice.slice(user.id.length + 1) : undefined;
    const revokedClient = revokedId === undefined || applications.some((a) => a.clientId === revokedId) ? undefined : await lookupClient(ctx.db, revokedId);
    const revoked = revokedClient?.name ?? null;
    return reply.view('account-applications.eta', { title: 'Your applications', wide: true, applications, revoked, csrfToken: formToken(reply) });
  });

  // The client ID is a form field, not part of the path: a metadata document's client ID is a URL.
  app.post('/account/applications/revoke', { ...page, preHandler: app.csrfProtection }, async (request, reply) => {
    const user = await currentUser(request, ctx);
    if (!user) return toLogin(request, reply, '/account/applications');
    const client = await lookupClient(ctx.db, field(requireFormBody(request), 'client_id'));
    if (!client) throw new PageRefusal(404, 'There is no application with this client ID.');
    // Nothing to remove (say, already removed in another tab): the page shows how things are.
    if (await removeAccess(ctx, user.id, client.id, request.ip)) {
      request.log.info({ event: 'access_removed', user: user.id, client: client.id }, 'access removed');
      reply.setCookie(noticeCookieName(ctx), `${user.id} ${client.id}`, { ...cookieOptions(ctx), maxAge: NOTICE_TTL });
    }
    return reply.redirect('/account/applications', 303);
  });
}
