/** `gatehouse issuer …`: the trusted issuers whose signed assertions the jwt-bearer grant accepts (SPEC §2, §4.11). */
import { COMMAND_LINE } from '../audit.ts';
import { PAGE_SIZE } from '../clients/clients.ts';
import { createIssuer, describeIssuer, listIssuers, removeIssuer } from '../oauth/assertions/issuers.ts';
import { UsageError, command, noArguments, oneArgument, type Command } from './command.ts';

const create = command({
  words: 'issuer create',
  usage: [
    '--issuer <url> --profile id-jag|workload [--jwks-uri <url>]',
    '[--allow-private-address] [--subject-claim sub|email] [--subject <exact sub>]',
    '[--client <client_id> …] [--scope "<s1 s2>"] [--resource <uri>]',
  ],
  help: [
    'trust an issuer of signed assertions: an enterprise IdP (id-jag:',
    'identity assertions its clients present) or a workload platform',
    '(workload: CI or Kubernetes tokens); its keys come from --jwks-uri,',
    'else from its discovery document (https; loopback and private',
    'addresses only with --allow-private-address). id-jag: --subject-claim',
    'says how users are found (sub: userid or username; email: a verified',
    'e-mail address), --client names the clients that may present its',
    'assertions (none: any confidential client). workload: --client is the',
    'one client its workloads act as, --subject the exact sub they must',
    'carry, --resource the resource their tokens are for by default.',
    '--scope caps the scopes it may obtain (absent: no cap of its own)',
  ],
  options: {
    issuer: { type: 'string', help: "the issuer's URL, exactly as the iss of its assertions" },
    profile: { type: 'string', help: "id-jag (an IdP's identity assertions) or workload (CI or Kubernetes tokens)" },
    'jwks-uri': { type: 'string', help: 'where its keys are (default: from its discovery document)' },
    'allow-private-address': { type: 'boolean', help: 'its keys may be on a loopback or private address' },
    'subject-claim': { type: 'string', help: 'id-jag: how users are found, sub (the default) or email (a verified one)' },
    subject: { type: 'string', help: 'workload: the exact sub its tokens must carry' },
    client: { type: 'string', multiple: true, help: 'a client that may present its assertions; workload: the one client' },
    scope: { type: 'string', multiple: true, help: 'the most it may obtain (default: no cap of its own)' },
    resource: { type: 'string', help: 'workload: the resource its tokens are for by default' },
  },
  async run(ctx, args, options, print) {
    noArguments(args);
    if (options.issuer === undefined) throw new UsageError('--issuer is required');
    if (options.profile === undefined) throw new UsageError('--profile is required (id-jag or workload)');
    const row = await createIssuer(
      ctx,
      {
        issuer: options.issuer,
        profile: options.profile,
        jwksUri: options['jwks-uri'] ?? null,
        allowPrivateAddress: options['allow-private-address'] ?? false,
        subjectClaim: options['subject-claim'] ?? 'sub',
        subject: options.subject ?? null,
        clients: options.client ?? [],
        scope: (options.scope ?? []).join(' '),
        resource: options.resource ?? null,
      },
      COMMAND_LINE,
    );
    // A shared platform issuer (GitHub Actions, a public cloud) signs tokens for everyone's
    // workloads: without --subject, any of them that asks for our audience acts as the client.
    const unpinned =
      row.profile === 'workload' && row.subject === null
        ? '\nWarning: no --subject, so any workload this issuer signs a token for acts as the client; pin one with --subject.'
        : '';
    print(describeIssuer(row), `Trusted ${row.issuer} (${row.profile}).${unpinned}`);
    return 0;
  },
});

const list = command({
  words: 'issuer list',
  usage: '[--limit <n>] [--after <url>]',
  help: ['the trusted issuers, by URL, 100 at a time (--limit: 1 to 1000);', '--after continues after that issuer'],
  options: {
    limit: { type: 'string', help: 'how many, from 1 to 1000 (default 100)' },
    after: { type: 'string', help: 'start after this issuer URL (the last one printed)' },
  },
  async run(ctx, args, options, print) {
    noArguments(args);
    const limit = options.limit === undefined ? PAGE_SIZE : Number(options.limit);
    if (!/^\d{1,4}$/.test(options.limit ?? '1') || limit < 1 || limit > 1000) throw new UsageError('--limit must be a whole number from 1 to 1000');
    const page = await listIssuers(ctx, options.after === undefined ? {} : { after: options.after }, limit);
    const issuers = page.rows.map(describeIssuer);
    const line = (i: (typeof issuers)[number]) =>
      [
        i.issuer,
        i.profile,
        i.jwks_uri ?? 'discovered',
        i.profile === 'id-jag' ? `subject: ${i.subject_claim}` : `subject: ${i.subject ?? 'any'}`,
        `clients: ${i.clients.join(' ') || 'any confidential'}`,
        `scopes: ${i.scopes?.join(' ') ?? 'any'}`,
        ...(i.resource === null ? [] : [`resource: ${i.resource}`]),
        ...(i.allow_private_address ? ['private addresses allowed'] : []),
      ].join('\t');
    const more = page.next ? `\nMore: gatehouse issuer list --after ${page.next.after}` : '';
    print(issuers, (issuers.map(line).join('\n') || 'No trusted issuers.') + more);
    return 0;
  },
});

const remove: Command = command({
  words: 'issuer delete',
  usage: '<url>',
  help: 'stop trusting the issuer: its assertions are refused from now on',
  async run(ctx, args, _options, print) {
    const issuer = oneArgument(remove, args);
    if (!(await removeIssuer(ctx, issuer, COMMAND_LINE))) throw new UsageError(`${issuer} is not a trusted issuer`);
    print({ issuer, deleted: true }, `${issuer} is no longer trusted.`);
    return 0;
  },
});

export const ISSUER_COMMANDS: readonly Command[] = [create, list, remove];
