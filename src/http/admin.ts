/**
 * The admin console (SPEC §4.5): OAuth clients (admin-clients.ts), resource servers
 * (admin-resources.ts), users (admin-users.ts), signing keys (admin-keys.ts), trusted issuers
 * (admin-issuers.ts), connections to upstream identity providers (admin-connections.ts) and
 * the audit trail (admin-audit.ts). Every route here is for enabled administrators only — the
 * guard below runs before anything else, so a form posted by anyone else changes nothing — and
 * every form is CSRF-protected. Pages are `no-store`: some show a client secret, which must not
 * outlive the page in a cache.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { User } from '../accounts/users.ts';
import type { Actor } from '../audit.ts';
import type { AppContext } from '../context.ts';
import auditRoutes from './admin-audit.ts';
import clientRoutes from './admin-clients.ts';
import connectionRoutes from './admin-connections.ts';
import issuerRoutes from './admin-issuers.ts';
import keyRoutes from './admin-keys.ts';
import resourceRoutes from './admin-resources.ts';
import userRoutes from './admin-users.ts';
import { navigation, page, toLogin } from './pages.ts';
import { currentUser } from './session.ts';

export default async function adminRoutes(app: FastifyInstance, { ctx }: { ctx: AppContext }) {
  const admins = new WeakMap<FastifyRequest, User>();

  // Encapsulated in this plugin: runs for every /admin route, before the body is even read.
  app.addHook('onRequest', async (request, reply) => {
    reply.header('Cache-Control', 'no-store');
    const user = await currentUser(request, ctx);
    if (!user) return toLogin(request, reply, '/admin');
    if (user.is_admin !== 1) {
      request.log.info({ event: 'admin_refused', user: user.id }, 'not an administrator');
      navigation(request, reply, user);
      return reply.code(403).view('forbidden.eta', {
        title: 'Administrators only',
        username: user.username,
        switchUrl: `/login?${new URLSearchParams({ switch: '1', next: request.method === 'GET' ? request.url : '/admin' })}`,
      });
    }
    admins.set(request, user);
    navigation(request, reply, user);
  });

  const admin = (request: FastifyRequest) => admins.get(request)!;
  const actor = (request: FastifyRequest): Actor => ({ userId: admin(request).id, address: request.ip });

  app.get('/admin', page, async (_request, reply) => reply.redirect('/admin/oauthclients'));

  // The rooms of the console, each its own plugin behind the same guard.
  await app.register(auditRoutes, { ctx });
  await app.register(resourceRoutes, { ctx, actor });
  await app.register(clientRoutes, { ctx, admin, actor });
  await app.register(userRoutes, { ctx, admin, actor });
  await app.register(keyRoutes, { ctx, actor });
  await app.register(issuerRoutes, { ctx, actor });
  await app.register(connectionRoutes, { ctx, actor });
}
