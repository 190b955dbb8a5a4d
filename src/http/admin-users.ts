/**
 * `/admin/users` (SPEC §4.5, §4.16): find, create, edit, disable, enable, delete (after a
 * confirm page) and promote users, a page at a time; `/admin/users/groups`: groups and their members. Registered inside the admin
 * console's plugin (src/http/admin.ts), whose guard admits enabled administrators only; every
 * form is CSRF-protected. The decisions and the audit are the domain's (src/accounts/), shared
 * with the CLI.
 */
import { connectionNamesOfUsers } from '../accounts/connections/connections.ts';
import { factorNamesOf } from '../accounts/second-factors.ts';
import { sendVerification } from '../accounts/email-verification.ts';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { addMember, allGroups, createGroup, groupsOf, removeGroup, removeMember } from '../accounts/groups.ts';
import {
  AccountError,
  createUser,
  deleteUser,
  disableUser,
  enableUser,
  findUser,
  findUserNamed,
  findUsers,
  promoteUser,
  updateProfile,
  type User,
} from '../accounts/users.ts';
import { cut } from '../input-error.ts';
import { single, type RawParams } from '../protocol/params.ts';
import { PageRefusal } from './errors.ts';
import { requireFormBody, type AdminRoomOptions } from './helpers.ts';
import { field, formatTime, page, pageCursor, sentence, ticked } from './pages.ts';
import { formToken } from './session.ts';

const NOTICES: Record<string, string> = {
  created: 'User created.',
  disabled: 'User disabled: their sessions ended and every access they gave was revoked.',
  enabled: 'User enabled: they may log in again.',
  deleted: 'User deleted: everything they had was revoked or removed.',
  promoted: 'User promoted to administrator.',
  saved: 'Changes saved.',
  verification_sent: 'A link to verify their address is on its way to it.',
  group_created: 'Group created.',
  group_deleted: 'Group deleted.',
  member_added: 'Member added.',
  member_removed: 'Member removed.',
};

function notice(request: FastifyRequest): string | null {
  const done = (request.query as RawParams).done;
  return typeof done === 'string' ? (NOTICES[done] ?? null) : null;
}

interface NewUserValues {
  username: string;
  email: string;
  name: string;
  admin: boolean;
  email_verified: boolean;
}

interface ProfileValues {
  name: string;
  email: string;
  email_verified: boolean;
}

type Errors = Record<string, string>;

export default async function userRoutes(app: FastifyInstance, { ctx, admin, actor }: AdminRoomOptions) {
  const post = { ...page, preHandler: app.csrfProtection };

  async function usersPage(request: FastifyRequest, reply: FastifyReply, form: { values: NewUserValues; errors: Errors }) {
    const params = request.query as RawParams;
    const query = (single(params, 'q') ?? '').trim().slice(0, 100);
    const cursor = pageCursor(params);
    const { rows, next, previous } = await findUsers(ctx, query, cursor);
    const link = (at: Record<string, string> | null) => at && `/admin/users?${new URLSearchParams({ ...(query ? { q: query } : {}), ...at })}`;
    const self = admin(request);
    const ids = rows.map((u) => u.id);
    const [factors, connections] = await Promise.all([factorNamesOf(ctx, ids), connectionNamesOfUsers(ctx, ids)]);
    return reply.view('admin-users.eta', {
      title: 'Users',
      wide: true,
      query,
      paged: 'after' in cursor || 'before' in cursor,
      next: link(next),
      previous: link(previous),
      users: rows.map((u) => ({
        id: u.id,
        username: u.username,
        name: u.display_name,
        email: u.email,
        emailVerified: u.email_verified === 1,
        admin: u.is_admin === 1,
        disabled: u.disabled === 1,
        self: u.id === self.id,
        created: formatTime(u.created_at),
        secondFactors: factors.get(u.id) ?? [],
        connections: connections.get(u.id) ?? [],
      })),
      notice: notice(request),
      csrfToken: formToken(reply),
      ...form,
    });
  }

  const noUser: NewUserValues = { username: '', email: '', name: '', admin: false, email_verified: false };
  app.get('/admin/users', page, async (request, reply) => usersPage(request, reply, { values: noUser, errors: {} }));

  app.post('/admin/users', post, async (request, reply) => {
    const body = requireFormBody(request);
    const values: NewUserValues = {
      username: field(body, 'username').trim(),
      email: field(body, 'email').trim(),
      name: field(body, 'name'),
      admin: ticked(body, 'admin'),
      email_verified: ticked(body, 'email_verified'),
    };
    try {
      const user = await createUser(
        ctx,
        {
          username: values.username,
          email: values.email,
          password: field(body, 'password'),
          isAdmin: values.admin,
          displayName: values.name,
          emailVerified: values.email_verified,
        },
        actor(request),
      );
      request.log.info({ event: 'admin_user_created', admin: admin(request).id, user: user.id }, 'user created');
    } catch (error) {
      if (!(error instanceof AccountError)) throw error;
      return usersPage(request, reply.code(400), { values, errors: { [error.field]: sentence(error.message) } });
    }
    return reply.redirect('/admin/users?done=created', 303);
  });

  async function groupsPage(
    reply: FastifyReply,
    form: { notice: string | null; values: { name: string }; errors: Errors; addError?: { group: string; message: string } },
  ) {
    return reply.view('admin-groups.eta', {
      title: 'Groups',
      groups: (await allGroups(ctx)).map((g) => ({ name: g.name, members: g.members.map((m) => m.username) })),
      csrfToken: formToken(reply),
      addError: null,
      ...form,
    });
  }

  app.get('/admin/users/groups', page, async (request, reply) => groupsPage(reply, { notice: notice(request), values: { name: '' }, errors: {} }));

  app.post('/admin/users/groups', post, async (request, reply) => {
    const name = field(requireFormBody(request), 'name').trim();
    try {
      await createGroup(ctx, name, actor(request));
    } catch (error) {
      if (!(error instanceof AccountError)) throw error;
      return groupsPage(reply.code(400), { notice: null, values: { name }, errors: { name: sentence(error.message) } });
    }
    return reply.redirect('/admin/users/groups?done=group_created', 303);
  });

  app.post('/admin/users/groups/delete', post, async (request, reply) => {
    try {
      await removeGroup(ctx, field(requireFormBody(request), 'group'), actor(request));
    } catch (error) {
      if (!(error instanceof AccountError)) throw error;
      throw new PageRefusal(404, 'There is no group with this name.');
    }
    return reply.redirect('/admin/users/groups?done=group_deleted', 303);
  });

  /** Adding and removing a member: the group and the username come as fields. */
  const memberActions = { add: [addMember, 'member_added'], remove: [removeMember, 'member_removed'] } as const;
  for (const [action, [perform, done]] of Object.entries(memberActions)) {
    app.post(`/admin/users/groups/${action}`, post, async (request, reply) => {
      const body = requireFormBody(request);
      const group = field(body, 'group');
      const username = field(body, 'username').trim();
      try {
        const user = await findUserNamed(ctx, username);
        if (!user)
          throw new AccountError('username', username === '' ? 'type the username of the person to add' : `there is no user named "${cut(username, 100)}"`);
        await perform(ctx, group, user, actor(request));
      } catch (error) {
        if (!(error instanceof AccountError)) throw error;
        return groupsPage(reply.code(400), { notice: null, values: { name: '' }, errors: {}, addError: { group, message: sentence(error.message) } });
      }
      return reply.redirect(`/admin/users/groups?done=${done}`, 303);
    });
  }

  async function userOr404(request: FastifyRequest): Promise<User> {
    const { id } = request.params as { id: string };
    const user = await findUser(ctx, id);
    if (!user) throw new PageRefusal(404, 'There is no user with this ID.');
    return user;
  }

  async function profileForm(reply: FastifyReply, user: User, form: { notice: string | null; values: ProfileValues; errors: Errors }) {
    return reply.view('admin-user-form.eta', {
      title: `Edit ${user.username}`,
      user: {
        id: user.id,
        username: user.username,
        groups: await groupsOf(ctx, user.id),
        disabled: user.disabled === 1,
        self: user.id === admin(reply.request).id,
        // Whether a verification link can be sent: an address, not verified, and mail to send it with.
        canVerify: ctx.mail.enabled && user.email !== '' && user.email_verified !== 1,
      },
      csrfToken: formToken(reply),
      ...form,
    });
  }

  app.get('/admin/users/:id', page, async (request, reply) => {
    const user = await userOr404(request);
    const values = { name: user.display_name ?? '', email: user.email, email_verified: user.email_verified === 1 };
    return profileForm(reply, user, { notice: notice(request), values, errors: {} });
  });

  app.post('/admin/users/:id', post, async (request, reply) => {
    const user = await userOr404(request);
    const body = requireFormBody(request);
    const values: ProfileValues = { name: field(body, 'name'), email: field(body, 'email').trim(), email_verified: ticked(body, 'email_verified') };
    // The box shows the stored flag: only ticking or unticking it sets the flag. Left as it
    // was, a new address is unverified (SPEC §4.10) until the box is ticked again.
    const toggled = values.email_verified !== (user.email_verified === 1);
    try {
      await updateProfile(
        ctx,
        user,
        { displayName: values.name, email: values.email, emailVerified: toggled ? values.email_verified : undefined },
        actor(request),
      );
    } catch (error) {
      if (!(error instanceof AccountError)) throw error;
      return profileForm(reply.code(400), user, { notice: null, values, errors: { [error.field]: sentence(error.message) } });
    }
    request.log.info({ event: 'admin_user_updated', admin: admin(request).id, user: user.id }, 'user updated');
    return reply.redirect(`/admin/users/${user.id}?done=saved`, 303);
  });

  app.post('/admin/users/:id/verify-email', post, async (request, reply) => {
    const user = await userOr404(request);
    requireFormBody(request);
    try {
      await sendVerification(ctx, user, actor(request));
    } catch (error) {
      if (!(error instanceof AccountError)) throw error;
      throw new PageRefusal(400, sentence(error.message));
    }
    return reply.redirect(`/admin/users/${user.id}?done=verification_sent`, 303);
  });

  /** The actions on one user, each a domain function that checks and audits itself. */
  const userActions = { disable: disableUser, enable: enableUser, promote: promoteUser } as const;
  for (const [action, perform] of Object.entries(userActions)) {
    app.post(`/admin/users/:id/${action}`, post, async (request, reply) => {
      const user = await userOr404(request);
      requireFormBody(request);
      await perform(ctx, user, actor(request));
      request.log.info({ event: `admin_user_${action}d`, admin: admin(request).id, user: user.id }, `user ${action}d`);
      return reply.redirect(`/admin/users?done=${action}d`, 303);
    });
  }

  // Deleting a person cannot be undone: a page says what goes, and its form does it.
  app.get('/admin/users/:id/delete', page, async (request, reply) => {
    const user = await userOr404(request);
    return reply.view('admin-user-delete.eta', {
      title: `Delete ${user.username}`,
      user: { id: user.id, username: user.username, email: user.email, admin: user.is_admin === 1, self: user.id === admin(request).id },
      csrfToken: formToken(reply),
    });
  });

  app.post('/admin/users/:id/delete', post, async (request, reply) => {
    const user = await userOr404(request);
    requireFormBody(request);
    try {
      await deleteUser(ctx, user, actor(request));
    } catch (error) {
      if (!(error instanceof AccountError)) throw error;
      throw new PageRefusal(400, sentence(error.message));
    }
    request.log.info({ event: 'admin_user_deleted', admin: admin(request).id, user: user.id }, 'user deleted');
    return reply.redirect('/admin/users?done=deleted', 303);
  });
}
