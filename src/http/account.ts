/**
 * The signed-in person's own pages: the applications they authorized (SPEC §4.5), each
 * with **Revoke access**, which revokes every grant the application holds from them (all
 * its tokens, on every instance) and forgets their consent, so the application has to ask
 * again.
 */
import type { FastifyInstance } from 'fastify';
import { isUuid } from '../oauth/client-auth.ts';
import type { AppContext } from '../context.ts';
import { single, type RawParams } from '../oauth/params.ts';
import { revoke } from '../oauth/revocation.ts';
import { SCOPE_DESCRIPTIONS, splitScopes } from '../oauth/scopes.ts';
import { findClient } from '../store/clients.ts';
import { listAuthorizedApplications } from '../store/applications.ts';
import { deleteConsent } from '../store/consents.ts';
import { requireFormBody } from './helpers.ts';
import { formatTime, navigation, page, toLogin } from './pages.ts';
import { currentUser } from './session.ts';

export default async function accountRoutes(app: FastifyInstance, { ctx }: { ctx: AppContext }) {
  app.get('/account/applications', page, async (request, reply) => {
    reply.header('Cache-Control', 'no-store');
    const user = await currentUser(request, ctx);
    if (!user) return toLogin(request, reply, '/account/applications');
    navigation(request, reply, user);
    const applications = (await listAuthorizedApplications(ctx.db, user.id, ctx.now())).map((application) => ({
      clientId: application.client_id,
      name: application.name,
      scopes: splitScopes(application.scopes).map((scope) => ({ scope, description: SCOPE_DESCRIPTIONS[scope] })),
      authorized: formatTime(application.authorized_at),
      lastUsed: formatTime(application.last_used_at),
    }));
    // Only an id comes back in the URL; the page names the application itself.
    const revokedId = single(request.query as RawParams, 'revoked');
    const revoked = revokedId !== undefined && isUuid(revokedId) ? ((await findClient(ctx.db, revokedId))?.name ?? null) : null;
    return reply.view('account-applications.eta', { title: 'Your applications', wide: true, applications, revoked, csrfToken: reply.generateCsrf() });
  });

  app.post('/account/applications/:clientId/revoke', { ...page, preHandler: app.csrfProtection }, async (request, reply) => {
    const user = await currentUser(request, ctx);
    if (!user) return toLogin(request, reply, '/account/applications');
    requireFormBody(request);
    const { clientId } = request.params as { clientId: string };
    if (isUuid(clientId)) {
      // Forget the consent first: the application must not get back in silently between the two steps.
      await deleteConsent(ctx.db, user.id, clientId);
      await revoke(ctx, { userId: user.id, clientId }, 'access_removed');
      request.log.info({ event: 'access_removed', user: user.id, client: clientId }, 'access removed');
      await ctx.audit({ type: 'access_removed', userId: user.id, clientId, address: request.ip });
    }
    return reply.redirect(`/account/applications?${new URLSearchParams({ revoked: clientId })}`, 303);
  });
}
