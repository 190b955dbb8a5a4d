/**
 * Every example's first step: is Gatehouse answering at GATEHOUSE_URL? If not, one line saying
 * what to start or which variable to set, and exit 1, rather than a fetch stack trace later.
 */
export async function requireGatehouse(issuer: URL): Promise<void> {
  // RFC 8414 §3.1: the well-known path goes before the issuer's own path.
  const metadata = new URL(`/.well-known/oauth-authorization-server${issuer.pathname.replace(/\/$/, '')}`, issuer);
  let status: number;
  try {
    status = (await fetch(metadata)).status;
  } catch {
    console.error(`Gatehouse is not answering at ${issuer.href}: start it (npm start) or set GATEHOUSE_URL to where it runs.`);
    process.exit(1);
  }
  if (status !== 200) {
    console.error(`${metadata.href} answered ${status}: set GATEHOUSE_URL to Gatehouse's PUBLIC_URL.`);
    process.exit(1);
  }
}
