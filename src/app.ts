/**
 * `buildApp(config, store)`: the whole HTTP server as an unstarted Fastify instance, used
 * by `gatehouse serve` and by the tests.
 */
import { fileURLToPath } from 'node:url';
import Fastify, {
  type FastifyError,
  type FastifyInstance,
  type FastifyReply,
  type onRequestHookHandler,
  type onSendHookHandler,
  type onResponseHookHandler,
} from 'fastify';
import cookie from '@fastify/cookie';
import cors, { type FastifyCorsOptions } from '@fastify/cors';
import csrf from '@fastify/csrf-protection';
import formbody from '@fastify/formbody';
import helmet, { type FastifyHelmetOptions } from '@fastify/helmet';
import fastifyStatic from '@fastify/static';
import view from '@fastify/view';
import { Eta } from 'eta';
import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import type { Config } from './config.ts';
import { type AppContext } from './context.ts';
import { createMetrics } from './metrics.ts';
import { finishHandlersOnClose } from './http/in-flight.ts';
import { openContext } from './open-context.ts';
import { OAuthError, invalidRequest } from './protocol/errors.ts';
import { USERINFO_PATH, metadataPaths } from './oauth/metadata.ts';
import { PAR_PATH } from './oauth/authorize.ts';
import type { Store } from './store/database.ts';
import accountRoutes from './http/account.ts';
import accountSecurityRoutes from './http/account-security.ts';
import adminRoutes from './http/admin.ts';
import apiRoutes from './http/api.ts';
import deviceRoutes from './http/device.ts';
import errorHandling from './http/errors.ts';
import jwksRoutes, { JWKS_PATH } from './http/jwks.ts';
import { parseForm } from './protocol/params.ts';
import { OneLinePerRequest, RequestLogger } from './http/logging.ts';
import loginRoutes from './http/login.ts';
import logoutRoutes from './http/logout.ts';
import oauthRoutes from './http/oauth.ts';
import passkeyLoginRoutes from './http/passkey-login.ts';
import opsRoutes from './http/ops.ts';
import registrationRoutes from './http/register.ts';
import connectionRoutes from './http/connections.ts';
import secondFactorRoutes from './http/second-factor.ts';
import accountFactorRoutes from './http/account-factors.ts';
import openapi from './http/openapi.ts';
import { cookieOptions, csrfCookieName, isHttps } from './http/session.ts';
import { warnOfSecretsInClear } from './secrets-at-rest.ts';
import setupRoutes from './http/setup.ts';
import mailedLinkRoutes from './http/mailed-links.ts';
import wsRoutes from './http/ws.ts';

declare module 'fastify' {
  interface FastifyInstance {
    /**
     * The application context, for the code that built the app (`gatehouse serve`, the
     * tests). Routes never read it from here: each gets it as its plugin option `ctx`.
     */
    gatehouse: AppContext;
  }
}

export interface AppOptions {
  /** Epoch milliseconds; tests inject a clock to move time. */
  now?: () => number;
  /** Pino destination stream, for tests that read the logs. */
  logStream?: NodeJS.WritableStream;
  /** Whether this process runs the scheduled purge (default true; of `WORKERS=n` workers, only one does: src/cluster.ts). */
  purges?: boolean;
}

/** A request id from the load balancer is kept when it is short and plain; otherwise one is made. */
const REQUEST_ID = /^[A-Za-z0-9._:-]{1,64}$/;

/** The endpoints browser-based clients call from other origins (SPEC §4.4), besides the metadata. */
const CORS_PATHS = [
  '/api/token',
  PAR_PATH,
  '/oauth/device_authorization',
  '/oauth/revoke',
  '/oauth/register',
  '/oauth/introspect',
  '/api/profile',
  '/api/links',
  USERINFO_PATH,
  '/openapi.json',
  JWKS_PATH,
];
/** What those endpoints answer: readable from any origin, without credentials. One object, made once, for every request. */
const CORS_ENDPOINT: FastifyCorsOptions = {
  origin: '*',
  methods: ['GET', 'POST'],
  // What browser-based clients send (SPEC §4.4): MCP clients their protocol version, DPoP clients a proof.
  allowedHeaders: ['Authorization', 'Content-Type', 'DPoP', 'MCP-Protocol-Version'],
  exposedHeaders: ['WWW-Authenticate', 'Retry-After', 'DPoP-Nonce'],
  maxAge: 600,
};
const NO_CORS: FastifyCorsOptions = { origin: false };

const HSTS = 'max-age=31536000; includeSubDomains';

/** Browser security headers for the pages (SPEC §4.5): no inline script, no framing, no Referer. */
const PAGE_SECURITY: FastifyHelmetOptions = {
  contentSecurityPolicy: {
    useDefaults: false,
    directives: {
      defaultSrc: ["'self'"],
      scriptSrc: ["'self'"],
      styleSrc: ["'self'"],
      imgSrc: ["'self'", 'data:'],
      objectSrc: ["'none'"],
      baseUri: ["'none'"],
      frameAncestors: ["'none'"],
    },
  },
  referrerPolicy: { policy: 'no-referrer' },
  strictTransportSecurity: false, // set with the headers of every response
  crossOriginResourcePolicy: false, // the CORS endpoints are meant to be read cross-origin
  crossOriginOpenerPolicy: false, // the popup flow needs window.opener across origins
  xFrameOptions: { action: 'deny' }, // frame-ancestors 'none' for browsers without CSP 2
};

/**
 * The headers helmet sets with these options. Without CSP nonces they are the same for every
 * page, so they are asked of @fastify/helmet once, on a throw-away instance, and the pages set
 * them from this table: no route runs helmet's per-request hooks (docs/performance.md).
 */
async function helmetHeaders(options: FastifyHelmetOptions): Promise<Record<string, string>> {
  const probe = Fastify();
  await probe.register(helmet, options);
  probe.get('/with', async () => '');
  probe.get('/without', { helmet: false }, async () => '');
  const [withHelmet, without] = [await probe.inject('/with'), await probe.inject('/without')];
  await probe.close();
  return Object.fromEntries(Object.entries(withHelmet.headers).filter(([name]) => !(name in without.headers))) as Record<string, string>;
}

/** The route's own hooks of one kind, as an array (Fastify takes a function or an array). */
function hooksOf<H>(hooks: H | H[] | undefined): H[] {
  return hooks === undefined ? [] : Array.isArray(hooks) ? hooks : [hooks];
}

/**
 * A path parameter is decoded from the URL, so `%00` puts NUL in it, and the admin pages look
 * their client, user or resource server up by it: refused here for every route that has one,
 * before the route reads it (why NUL is refused at all: protocol/params.ts holdsNul).
 */
const refuseNulInPath: onRequestHookHandler = (request, _reply, done) => {
  const params = request.params as Record<string, string>;
  for (const name in params) if (params[name]!.includes('\0')) return done(invalidRequest('the request URL contains a NUL character'));
  done();
};

/** The path of a request URL, without its query. */
function pathOf(url: string): string {
  const query = url.indexOf('?');
  return query < 0 ? url : url.slice(0, query);
}

/** A request whose headers and body have not all arrived by then is answered 408 and its connection closed (SPEC §4.6). */
export const REQUEST_TIMEOUT_MS = 30_000;
/** How often Node looks for such requests: its default, 30 s, would let one last up to a minute. */
const TIMEOUT_CHECK_INTERVAL_MS = 1000;
/** A connection silent this long in the middle of a request or a response (a reader that stopped reading) is dropped. */
const IDLE_CONNECTION_TIMEOUT_MS = 60_000;

/** Trusts the nearest `hops` proxies (Fastify types a hop count only as this function). */
function hopsToTrust(hops: number) {
  return (_address: string, hop: number) => hop < hops;
}

export async function buildApp(config: Config, store: Store, options: AppOptions = {}): Promise<FastifyInstance> {
  const app = Fastify({
    logger: {
      level: config.logLevel,
      ...(options.logStream ? { stream: options.logStream } : {}),
      serializers: {
        // The path only: query strings can carry tokens (e.g. /ws?access_token=…) and codes.
        req: (request) => ({ method: request.method, path: request.url.split('?')[0], remoteAddress: request.ip }),
        res: (reply) => ({ statusCode: reply.statusCode }),
      },
    },
    bodyLimit: 64 * 1024,
    requestTimeout: REQUEST_TIMEOUT_MS,
    connectionTimeout: IDLE_CONNECTION_TIMEOUT_MS, // between requests, the keep-alive timeout applies instead (Fastify's default, 72 s)
    // Node enforces requestTimeout only when headersTimeout is no longer than it.
    http: { headersTimeout: REQUEST_TIMEOUT_MS, connectionsCheckingInterval: TIMEOUT_CHECK_INTERVAL_MS },
    routerOptions: {
      maxParamLength: 200,
      querystringParser: (text) => parseForm(text) as Record<string, string | string[]>,
    },
    trustProxy: typeof config.trustProxy === 'number' ? hopsToTrust(config.trustProxy) : config.trustProxy,
    return503OnClosing: true,
    genReqId: (request) => {
      const given = request.headers['x-request-id'];
      return typeof given === 'string' && REQUEST_ID.test(given) ? given : randomUUID();
    },
    logController: new OneLinePerRequest(),
    childLoggerFactory: (logger, bindings, options) => new RequestLogger(logger as Logger, bindings, options),
    // A path Fastify cannot route (bad percent-encoding, an over-long segment) is answered like
    // every other bad request, and without quoting the URL back.
    frameworkErrors: (error, request, reply) => {
      const tooLong = error.code === 'FST_ERR_MAX_PARAM_LENGTH';
      // Answered by the same error handler as every other refusal (src/http/errors.ts).
      void app.errorHandler(
        new OAuthError(
          'invalid_request',
          tooLong ? 'the request URL is too long' : 'the request URL is malformed',
          error.code,
          tooLong ? 414 : 400,
        ) as unknown as FastifyError,
        request,
        reply as FastifyReply,
      );
    },
  });
  const ctx = await openContext(config, store, app.log, { now: options.now, metrics: createMetrics(store) });
  // A serving process hears what the others change (on SQLite, by reading the database: events/fan-out.ts); ctx.close() stops it.
  app.addHook('onReady', async () => ctx.services.bus.listen());
  app.addHook('onClose', () => ctx.close());
  finishHandlersOnClose(app, app.log); // before ctx.close(): onClose hooks run last-added first
  if (config.keys.secret === null && config.database.kind === 'postgres') await warnOfSecretsInClear(store.db, app.log);
  const { metrics } = ctx;
  // Every answer gets nosniff and, behind https, HSTS; helmet's browser headers come from a
  // table made once, set on the pages and on a path nothing is routed to (a 404). On the bearer
  // path, helmet's per-request work was a measurable share of the CPU (docs/performance.md).
  const everyResponse = { 'X-Content-Type-Options': 'nosniff', ...(isHttps(ctx.config) ? { 'Strict-Transport-Security': HSTS } : {}) };
  const pageHeaders = await helmetHeaders(PAGE_SECURITY);
  const unrouted = { ...everyResponse, ...pageHeaders };
  // Hooks that run on every request take a callback rather than returning a promise: one
  // promise and a microtask less per request on the bearer path (docs/performance.md).
  app.addHook('onRequest', (request, reply, done) => {
    reply.header('X-Request-Id', request.id).headers(request.is404 ? unrouted : everyResponse);
    done();
  });
  const unmatched = new Map<string, ReturnType<typeof metrics.requests>>();
  app.addHook('onResponse', (request, reply, done) => {
    if (request.is404) {
      let count = unmatched.get(request.method);
      if (count === undefined) unmatched.set(request.method, (count = metrics.requests(request.method, 'unmatched')));
      count(reply.statusCode, reply.elapsedTime / 1000);
    }
    done();
  });
  // What depends on the route is settled when it is added: its headers, and its metrics
  // labelled with the route pattern — bounded label values, and no code or token from a
  // query string.
  app.addHook('onRoute', (route) => {
    if (route.config?.page) {
      // When the answer is sent, not when the request arrives: a plugin's own hooks run before
      // a route's, and a guard among them (admin.ts: the redirect to /login, the 403 page)
      // answers before any onRequest hook of the route would have run.
      const setHeaders: onSendHookHandler = (_request, reply, payload, done) => {
        reply.headers(pageHeaders);
        done(null, payload);
      };
      route.onSend = [...hooksOf(route.onSend), setHeaders];
    }
    const counts = new Map<string, ReturnType<typeof metrics.requests>>();
    const count: onResponseHookHandler = (request, reply, done) => {
      let answered = counts.get(request.method);
      if (answered === undefined) counts.set(request.method, (answered = metrics.requests(request.method, route.url)));
      answered(reply.statusCode, reply.elapsedTime / 1000);
      done();
    };
    route.onResponse = [...hooksOf(route.onResponse), count];
    // A route's own hooks run after its plugins' (admin.ts's guard answers first); only routes with parameters pay for it.
    if (/[:*]/.test(route.url)) route.onRequest = [...hooksOf(route.onRequest), refuseNulInPath];
  });

  app.removeAllContentTypeParsers(); // only forms are accepted (and JSON at /oauth/register, http/register.ts); anything else is a 400
  await app.register(formbody, { parser: (text) => parseForm(text) });
  await app.register(errorHandling, { ctx });
  await app.register(cookie);
  await app.register(csrf, {
    cookieKey: csrfCookieName(ctx),
    cookieOpts: cookieOptions(ctx),
    getToken: (request) => (request.body as Record<string, unknown> | undefined)?._csrf as string,
  });
  const corsPaths = new Set([...CORS_PATHS, ...metadataPaths(config)]);
  await app.register(cors, { delegator: (request, callback) => callback(null, corsPaths.has(pathOf(request.url ?? '')) ? CORS_ENDPOINT : NO_CORS) });
  await app.register(view, {
    engine: { eta: new Eta({ autoEscape: true }) },
    root: fileURLToPath(new URL('./views', import.meta.url)),
    layout: 'layout.eta',
    production: true,
  });
  await app.register(fastifyStatic, { root: fileURLToPath(new URL('../static', import.meta.url)), prefix: '/static/', maxAge: 3600 * 1000 });

  await app.register(openapi, { publicUrl: config.publicUrl }); // before the routes: it collects their schemas
  await app.register(oauthRoutes, { ctx });
  await app.register(registrationRoutes, { ctx });
  await app.register(jwksRoutes, { ctx });
  await app.register(apiRoutes, { ctx });
  await app.register(loginRoutes, { ctx });
  await app.register(secondFactorRoutes, { ctx });
  await app.register(logoutRoutes, { ctx });
  await app.register(setupRoutes, { ctx });
  await app.register(mailedLinkRoutes, { ctx });
  await app.register(accountRoutes, { ctx });
  await app.register(accountFactorRoutes, { ctx });
  await app.register(accountSecurityRoutes, { ctx });
  await app.register(passkeyLoginRoutes, { ctx });
  await app.register(connectionRoutes, { ctx });
  await app.register(deviceRoutes, { ctx });
  await app.register(adminRoutes, { ctx });
  await app.register(opsRoutes, { ctx, purges: options.purges ?? true });
  await app.register(wsRoutes, { ctx });

  app.decorate('gatehouse', ctx);
  return app;
}
