/**
 * `/admin/keys` (SPEC §4.5, §4.9): the signing keys with their state and dates, rotation
 * (after the publication lead, or at once), and revocation of one key after a confirming
 * page, as `gatehouse keys revoke` does. Registered inside the admin console's plugin
 * (src/http/admin.ts), whose guard admits enabled administrators only; the forms are
 * CSRF-protected. The decisions and the audit are the domain's (src/identity/keys.ts), shared
 * with the CLI. Kid, algorithm, state and dates only: never private material.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Actor } from '../audit.ts';
import type { AppContext } from '../context.ts';
import { KeyInputError, listKeys, revokeKey, rotateKeys, type KeyView } from '../identity/key-schedule.ts';
import type { RawParams } from '../protocol/params.ts';
import { PageRefusal } from './errors.ts';
import { requireFormBody } from './helpers.ts';
import { field, formatTime, page } from './pages.ts';
import { formToken } from './session.ts';

const NOTICES: Record<string, string> = {
  rotated: 'New keys are published; they sign after the publication lead (one hour).',
  'rotated-now': 'New keys are signing from now on; the old ones are retiring.',
  revoked: 'The key was revoked: it left the JWKS, and nothing it signed verifies any more.',
  'revoked-active': 'The key was revoked: it left the JWKS, and nothing it signed verifies any more. A new key of its algorithm signs from now on.',
};

const noSuchKey = () => new PageRefusal(404, 'There is no signing key with this ID.');

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

  async function keyOr404(request: FastifyRequest): Promise<KeyView> {
    const { kid } = request.params as { kid: string };
    const key = (await listKeys(ctx)).find((candidate) => candidate.kid === kid);
    if (!key) throw noSuchKey();
    return key;
  }

  // Revoking is destructive (everything the key signed stops verifying): a page of its own confirms it first.
  app.get('/admin/keys/:kid/revoke', page, async (request, reply) => {
    const key = await keyOr404(request);
    return reply.view('admin-key-revoke.eta', { title: `Revoke key ${key.kid}`, key, csrfToken: formToken(reply) });
  });

  app.post('/admin/keys/:kid/revoke', post, async (request, reply) => {
    const { kid } = request.params as { kid: string };
    requireFormBody(request);
    let revoked: KeyView;
    try {
      revoked = await revokeKey(ctx, kid, actor(request));
    } catch (error) {
      if (error instanceof KeyInputError) throw noSuchKey(); // no such kid, or revoked meanwhile
      throw error;
    }
    request.log.info({ event: 'admin_key_revoked', kid: revoked.kid, alg: revoked.alg }, 'signing key revoked');
    return reply.redirect(`/admin/keys?done=${revoked.state === 'active' ? 'revoked-active' : 'revoked'}`, 303);
  });
}
