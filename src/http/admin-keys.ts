/**
 * `/admin/keys` (SPEC §4.5, §4.9): the signing keys with their state and dates, and rotation
 * (after the publication lead, or at once). Registered inside the admin console's plugin
 * (src/http/admin.ts), whose guard admits enabled administrators only; the forms are
 * CSRF-protected. The decisions and the audit are the domain's (src/identity/keys.ts), shared
 * with the CLI. Kid, algorithm, state and dates only: never private material.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Actor } from '../audit.ts';
import type { AppContext } from '../context.ts';
import { listKeys, rotateKeys } from '../identity/keys.ts';
import type { RawParams } from '../protocol/params.ts';
import { requireFormBody } from './helpers.ts';
import { field, formatTime, page } from './pages.ts';
import { formToken } from './session.ts';

const NOTICES: Record<string, string> = {
  rotated: 'New keys are published; they sign after the publication lead (one hour).',
  'rotated-now': 'New keys are signing from now on; the old ones are retiring.',
};

export default async function keyRoutes(app: FastifyInstance, { ctx, actor }: { ctx: AppContext; actor: (request: FastifyRequest) => Actor }) {
  const post = { ...page, preHandler: app.csrfProtection };

  app.get('/admin/keys', page, async (request, reply) => {
    const done = (request.query as RawParams).done;
    const keys = (await listKeys(ctx)).map((key) => ({
      ...key,
      created: formatTime(key.createdAt),
      activates: formatTime(key.activatesAt),
      retires: key.retiresAt === null ? null : formatTime(key.retiresAt),
    }));
    return reply.view('admin-keys.eta', {
      title: 'Signing keys',
      wide: true,
      keys,
      notice: typeof done === 'string' ? (NOTICES[done] ?? null) : null,
      csrfToken: formToken(reply),
    });
  });

  app.post('/admin/keys/rotate', post, async (request, reply) => {
    const now = field(requireFormBody(request), 'now') === '1';
    await rotateKeys(ctx, { now }, actor(request));
    request.log.info({ event: 'admin_keys_rotated', now }, 'signing keys rotated');
    return reply.redirect(`/admin/keys?done=${now ? 'rotated-now' : 'rotated'}`, 303);
  });
}
