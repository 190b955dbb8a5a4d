/**
 * `/admin/issuers` (SPEC §4.5, §4.11): the trusted issuers whose signed assertions the
 * jwt-bearer grant accepts — listed a page at a time, added, deleted. Registered inside the
 * admin console's plugin (src/http/admin.ts), whose guard admits enabled administrators only;
 * the forms are CSRF-protected. The decisions and the audit are the domain's
 * (src/oauth/assertions/issuers.ts), shared with `gatehouse issuer`.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Actor } from '../audit.ts';
import type { AppContext } from '../context.ts';
import { PAGE_SIZE } from '../clients/clients.ts';
import { IssuerInputError, ISSUER_PROFILES, createIssuer, describeIssuer, listIssuers, removeIssuer } from '../oauth/assertions/issuers.ts';
import type { RawParams } from '../protocol/params.ts';
import { requireFormBody } from './helpers.ts';
import { field, formatTime, page, pageCursor, ticked } from './pages.ts';
import { formToken } from './session.ts';

const NOTICES: Record<string, string> = {
  added: 'The issuer is trusted: its assertions are accepted from now on.',
  deleted: 'The issuer is no longer trusted: its assertions are refused from now on.',
};

const EMPTY = {
  issuer: '',
  profile: 'id-jag',
  jwks_uri: '',
  allow_private_address: false,
  subject_claim: 'sub',
  subject: '',
  clients: '',
  scope: '',
  resource: '',
};
type Values = typeof EMPTY;

export default async function issuerRoutes(app: FastifyInstance, { ctx, actor }: { ctx: AppContext; actor: (request: FastifyRequest) => Actor }) {
  const post = { ...page, preHandler: app.csrfProtection };

  async function listPage(request: FastifyRequest, reply: FastifyReply, values: Values, errors: Record<string, string>) {
    const query = request.query as RawParams;
    const cursor = pageCursor(query);
    const { rows, next, previous } = await listIssuers(ctx, cursor, PAGE_SIZE);
    const done = query.done;
    return reply.view('admin-issuers.eta', {
      title: 'Trusted issuers',
      wide: true,
      issuers: rows.map((row) => ({ ...describeIssuer(row), created: formatTime(row.created_at) })),
      paged: 'after' in cursor || 'before' in cursor,
      next: next && `/admin/issuers?${new URLSearchParams(next)}`,
      previous: previous && `/admin/issuers?${new URLSearchParams(previous)}`,
      notice: typeof done === 'string' ? (NOTICES[done] ?? null) : null,
      profiles: ISSUER_PROFILES,
      values,
      errors,
      csrfToken: formToken(reply),
    });
  }

  app.get('/admin/issuers', page, (request, reply) => listPage(request, reply, EMPTY, {}));

  app.post('/admin/issuers', post, async (request, reply) => {
    const body = requireFormBody(request);
    const values: Values = {
      issuer: field(body, 'issuer').trim(),
      profile: field(body, 'profile'),
      jwks_uri: field(body, 'jwks_uri').trim(),
      allow_private_address: ticked(body, 'allow_private_address'),
      subject_claim: field(body, 'subject_claim') || 'sub',
      subject: field(body, 'subject').trim(),
      clients: field(body, 'clients'),
      scope: field(body, 'scope').trim(),
      resource: field(body, 'resource').trim(),
    };
    try {
      const row = await createIssuer(
        ctx,
        {
          issuer: values.issuer,
          profile: values.profile,
          jwksUri: values.jwks_uri || null,
          allowPrivateAddress: values.allow_private_address,
          subjectClaim: values.subject_claim,
          subject: values.subject || null,
          clients: values.clients.split(/\s+/).filter((c) => c !== ''),
          scope: values.scope,
          resource: values.resource || null,
        },
        actor(request),
      );
      request.log.info({ event: 'admin_issuer_added', profile: row.profile }, 'trusted issuer added');
    } catch (error) {
      if (!(error instanceof IssuerInputError)) throw error;
      return listPage(request, reply.code(400), values, { [error.field]: error.message });
    }
    return reply.redirect('/admin/issuers?done=added', 303);
  });

  app.post('/admin/issuers/delete', post, async (request, reply) => {
    const issuer = field(requireFormBody(request), 'issuer');
    await removeIssuer(ctx, issuer, actor(request));
    request.log.info({ event: 'admin_issuer_deleted' }, 'trusted issuer deleted');
    return reply.redirect('/admin/issuers?done=deleted', 303);
  });
}
