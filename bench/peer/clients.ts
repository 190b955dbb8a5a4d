/** The peer's fixed clients and user, shared by bench/peer/server.ts and the bench that drives it. */
export const PEER_CLIENTS = {
  public: 'bench-public',
  confidential: 'bench-confidential',
  confidentialSecret: 'bench-confidential-secret-that-is-long-enough',
  device: 'bench-device',
  resourceServer: 'bench-resource-server',
  resourceServerSecret: 'bench-resource-server-secret-that-is-long-enough',
  username: 'bench',
} as const;
export const PEER_REDIRECT_URI = 'http://127.0.0.1:9/callback';
