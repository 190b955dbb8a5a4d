/**
 * The signed-in person's own pages: the applications they authorized (SPEC §4.5), each
 * with **Revoke access** (see src/clients/access.ts).
 */
import type { FastifyInstance } from 'fastify';
import { authorizedApplications, removeAccess } from '../clients/access.ts';
import { findClient } from '../clients/clients.ts';
import type { AppContext } from '../context.ts';
import { single, type RawParams } from '../oauth/params.ts';
import { scopeDescriptions } from '../oauth/resources.ts';
import { splitScopes } from '../oauth/scopes.ts';
import { requireFormBody } from './helpers.ts';
import { formatTime, navigation, page, toLogin } from './pages.ts';
import { currentUser, formToken } from './session.ts';

export default async function accountRoutes(app: FastifyInstance, { ctx }: { ctx: AppContext }) {
  app.get('/account/applications', page, async (request, reply) => {
    reply.header('Cache-Control', 'no-store');
    const user = await currentUser(request, ctx);
    if (!user) return toLogin(request, reply, '/account/applications');
    navigation(request, reply, user);
    const described = await scopeDescriptions(ctx);
    const applications = (await authorizedApplications(ctx, user.id)).map((application) => ({
      clientId: application.client_id,
      name: application.name,
      scopes: splitScopes(application.scopes).map((scope) => ({ scope, description: described.get(scope) ?? scope })),
      authorized: formatTime(application.authorized_at),
      lastUsed: formatTime(application.last_used_at),
    }));
    // Only an id comes back in the URL; the page names the application itself.
    const revokedId = single(request.query as RawParams, 'revoked');
    const revoked = revokedId === undefined ? null : ((await findClient(ctx, revokedId))?.name ?? null);
    return reply.view('account-applications.eta', { title: 'Your applications', wide: true, applications, revoked, csrfToken: formToken(reply) });
  });

  app.post('/account/applications/:clientId/revoke', { ...page, preHandler: app.csrfProtection }, async (request, reply) => {
    const user = await currentUser(request, ctx);
    if (!user) return toLogin(request, reply, '/account/applications');
    requireFormBody(request);
    const { clientId } = request.params as { clientId: string };
    if (await removeAccess(ctx, user.id, clientId, request.ip)) request.log.info({ event: 'access_removed', user: user.id, client: clientId }, 'access removed');
    return reply.redirect(`/account/applications?${new URLSearchParams({ revoked: clientId })}`, 303);
  });
}
