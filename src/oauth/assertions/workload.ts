/**
 * Workload identity federation (SPEC §4.11): a CI job (GitHub Actions' OIDC token) or a
 * Kubernetes pod (a projected service account token) presents the token its platform signed
 * for it, instead of a client secret that would have to be stored beside it. The trusted
 * issuer names the one client its workloads act as (and, optionally, the exact `sub` — the
 * repository and branch, the namespace and service account — that may); the token it gets
 * is that client's own, as with client_credentials, without a refresh token.
 */
import type { AppContext } from '../../context.ts';
import type { Client, TrustedIssuer } from '../../store/schema.ts';
import { RECEIVED_JWT_LEEWAY_SECONDS } from '../../protocol/received-jwt.ts';
import { refused, type ReadAssertion, type VerifiedAssertion } from './profiles.ts';
import { stringClaim, verifyIssuerAssertion } from './trusted.ts';

/** A workload's token may be valid for at most this much longer (SPEC §4.11). */
const MAX_REMAINING_SECONDS = 3600;

/** The client the issuer's workloads act as: the one its `--client` named. */
export function workloadClientId(trusted: TrustedIssuer): string | undefined {
  return (JSON.parse(trusted.clients) as string[])[0];
}

export async function verifyWorkload(read: ReadAssertion, trusted: TrustedIssuer, ctx: AppContext): Promise<VerifiedAssertion> {
  const clientId = workloadClientId(trusted);
  const client: Client | undefined = clientId === undefined ? undefined : await ctx.clients.find(clientId);
  if (!client) throw refused("this issuer's workloads have no client to act as", `no client for workload issuer ${trusted.issuer}`);
  const claims: Record<string, unknown> = await verifyIssuerAssertion(
    read,
    trusted,
    ctx,
    {
      audience: [`${ctx.config.publicUrl}/api/token`, ctx.config.publicUrl],
      subject: trusted.subject ?? undefined,
      requiredClaims: ['exp'],
      maxExpiresInSeconds: MAX_REMAINING_SECONDS,
    },
    {
      aud: "the assertion's audience (aud) must be this server's token endpoint or issuer",
      sub: "the assertion's subject (sub) is not the one this issuer's workloads must have",
      'expires-in': 'the assertion expires more than an hour from now',
    },
  );
  const exp = claims.exp as number;
  const sub = stringClaim(claims, 'sub');
  const jti = stringClaim(claims, 'jti') ?? null;
  return {
    profile: 'workload',
    issuer: trusted.issuer,
    client,
    user: null,
    subject: sub ?? '',
    jti,
    // Single use only when it says which token it is: a platform token without a jti is used until it expires.
    replayId: jti,
    replayUntil: (exp + RECEIVED_JWT_LEEWAY_SECONDS) * 1000,
    trusted,
    assertedScopes: null,
    assertedResource: null,
  };
}
