/**
 * `/admin/users` (SPEC §4.5): find, create, disable and promote users. Registered inside the
 * admin console's plugin (src/http/admin.ts), whose guard admits enabled administrators only;
 * every form is CSRF-protected. The decisions and the audit are the domain's
 * (src/accounts/users.ts), shared with the CLI.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { AccountError, createUser, disableUser, findUser, findUsers, promoteUser, type User } from '../accounts/users.ts';
import { OAuthError } from '../oauth/errors.ts';
import { single, type RawParams } from '../oauth/params.ts';
import type { AdminRoomOptions } from './admin.ts';
import { requireFormBody } from './helpers.ts';
import { field, formatTime, page, sentence, ticked } from './pages.ts';
import { formToken } from './session.ts';

/** At most this many users are listed at once; the search narrows the list. */
const USER_LIST_LIMIT = 200;

const NOTICES: Record<string, string> = {
  created: 'User created.',
  disabled: 'User disabled: their sessions ended and every access they gave was revoked.',
  promoted: 'User promoted to administrator.',
};

function notice(request: FastifyRequest): string | null {
  const done = (request.query as RawParams).done;
  return typeof done === 'string' ? (NOTICES[done] ?? null) : null;
}

export default async function userRoutes(app: FastifyInstance, { ctx, admin, actor }: AdminRoomOptions) {
  const post = { ...page, preHandler: app.csrfProtection };

  async function usersPage(
    request: FastifyRequest,
    reply: FastifyReply,
    form: { values: { username: string; email: string; admin: boolean }; errors: Record<string, string> },
  ) {
    const query = (single(request.query as RawParams, 'q') ?? '').trim().slice(0, 100);
    const users = await findUsers(ctx, query, USER_LIST_LIMIT);
    const self = admin(request);
    return reply.view('admin-users.eta', {
      title: 'Users',
      wide: true,
      query,
      limited: users.length === USER_LIST_LIMIT,
      users: users.map((u) => ({
        id: u.id,
        username: u.username,
        email: u.email,
        admin: u.is_admin === 1,
        disabled: u.disabled === 1,
        self: u.id === self.id,
        created: formatTime(u.created_at),
      })),
      notice: notice(request),
      csrfToken: formToken(reply),
      ...form,
    });
  }

  app.get('/admin/users', page, async (request, reply) => usersPage(request, reply, { values: { username: '', email: '', admin: false }, errors: {} }));

  app.post('/admin/users', post, async (request, reply) => {
    const body = requireFormBody(request);
    const values = { username: field(body, 'username').trim(), email: field(body, 'email').trim(), admin: ticked(body, 'admin') };
    try {
      const user = await createUser(
        ctx,
        { username: values.username, email: values.email, password: field(body, 'password'), isAdmin: values.admin },
        actor(request),
      );
      request.log.info({ event: 'admin_user_created', admin: admin(request).id, user: user.id }, 'user created');
    } catch (error) {
      if (!(error instanceof AccountError)) throw error;
      return usersPage(request, reply.code(400), { values, errors: { [error.field]: sentence(error.message) } });
    }
    return reply.redirect('/admin/users?done=created', 303);
  });

  async function userOr404(request: FastifyRequest): Promise<User> {
    const { id } = request.params as { id: string };
    const user = await findUser(ctx, id);
    if (!user) throw new OAuthError('invalid_request', 'There is no user with this ID.', undefined, 404);
    return user;
  }

  /** The actions on one user, each a domain function that checks and audits itself. */
  const userActions = { disable: disableUser, promote: promoteUser } as const;
  for (const [action, perform] of Object.entries(userActions)) {
    app.post(`/admin/users/:id/${action}`, post, async (request, reply) => {
      const user = await userOr404(request);
      requireFormBody(request);
      await perform(ctx, user, actor(request));
      request.log.info({ event: `admin_user_${action}d`, admin: admin(request).id, user: user.id }, `user ${action}d`);
      return reply.redirect(`/admin/users?done=${action}d`, 303);
    });
  }
}
