/**
 * CPU profiles of the server, one per bench phase. The server runs with `--inspect` and
 * the bench starts and stops V8's sampling profiler around each phase through the
 * inspector protocol: the same `.cpuprofile` that `node --cpu-prof` writes at exit, but cut
 * to one operation so its hotspots are not mixed with set-up and the other phases. Open a
 * file in Chrome DevTools (Performance → Load profile) or https://www.speedscope.app.
 */
import type { Profiler, Runtime } from 'node:inspector';
import { relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ROOT } from './harness.ts';

export interface ProfilerSession {
  start(): Promise<void>;
  stop(): Promise<Profiler.Profile>;
  /** Disconnects; a server with a debugger still attached would wait for it before exiting. */
  close(): Promise<void>;
}

/** Connects to the inspector at `inspectorUrl` (ws://…) and prepares the profiler. */
export async function connectProfiler(inspectorUrl: string, samplingIntervalMicros = 250): Promise<ProfilerSession> {
  const socket = new WebSocket(inspectorUrl);
  await new Promise<void>((resolve, reject) => {
    socket.onopen = () => resolve();
    socket.onerror = () => reject(new Error(`cannot connect to the server's inspector at ${inspectorUrl}`));
  });
  let lastId = 0;
  const pending = new Map<number, { resolve: (result: any) => void; reject: (error: Error) => void }>();
  socket.onmessage = (event) => {
    const message = JSON.parse(String(event.data)) as { id?: number; result?: unknown; error?: { message: string } };
    const waiter = message.id === undefined ? undefined : pending.get(message.id);
    if (!waiter) return; // events
    pending.delete(message.id!);
    if (message.error) waiter.reject(new Error(`inspector: ${message.error.message}`));
    else waiter.resolve(message.result);
  };
  const send = (method: string, params: object = {}) =>
    new Promise<any>((resolve, reject) => {
      const id = ++lastId;
      pending.set(id, { resolve, reject });
      socket.send(JSON.stringify({ id, method, params }));
    });
  await send('Profiler.enable');
  await send('Profiler.setSamplingInterval', { interval: samplingIntervalMicros });
  return {
    start: async () => void (await send('Profiler.start')),
    stop: async () => ((await send('Profiler.stop')) as { profile: Profiler.Profile }).profile,
    close: () =>
      new Promise<void>((resolve) => {
        socket.onclose = () => resolve();
        socket.close();
      }),
  };
}

export interface HotSpot {
  /** A function (name and place) or an area (package, Node.js module, source file). */
  name: string;
  selfMs: number;
  /** Share of the busy (non-idle) time, 0..1. */
  share: number;
}

export interface ProfileSummary {
  /** Sampled time the server was doing something, ms. */
  busyMs: number;
  idleMs: number;
  functions: HotSpot[];
  areas: HotSpot[];
  /** Gatehouse's own functions (src/) by inclusive time: what each costs with everything it calls. */
  ownInclusive: HotSpot[];
}

/** Where a function lives, readable: `src/store/grants.ts`, `node_modules/kysely/…`, `node:internal/…`. */
function place(url: string): string {
  if (url === '') return '';
  const path = url.startsWith('file://') ? fileURLToPath(url) : url;
  return path.startsWith('/') ? relative(ROOT, path) : path;
}

/** The package, Node.js module or source file a function belongs to. */
function area(callFrame: Runtime.CallFrame): string {
  const where = place(callFrame.url);
  if (where === '') return /^\(.*\)$/.test(callFrame.functionName) ? callFrame.functionName : '(native)';
  const modules = where.lastIndexOf('node_modules/');
  if (modules >= 0) {
    const [scope, name] = where.slice(modules + 'node_modules/'.length).split('/');
    return scope!.startsWith('@') ? `${scope}/${name}` : scope!;
  }
  if (where.startsWith('node:')) {
    const module = where
      .slice('node:'.length)
      .replace(/^internal\//, '')
      .split('/')[0]!
      .replace(/\.js$/, '');
    return `node:${module}`;
  }
  return where;
}

/** Self time per function and per area, largest first. */
export function summarise(profile: Profiler.Profile, top = 15): ProfileSummary {
  const nodes = new Map(profile.nodes.map((node) => [node.id, node]));
  const selfMs = new Map<number, number>();
  const samples = profile.samples ?? [];
  const deltas = profile.timeDeltas ?? [];
  // timeDeltas[i] is the time before sample i; a sample lasts until the next one.
  samples.forEach((id, i) => selfMs.set(id, (selfMs.get(id) ?? 0) + (deltas[i + 1] ?? 0) / 1000));

  const parents = new Map<number, number>();
  for (const node of profile.nodes) for (const child of node.children ?? []) parents.set(child, node.id);
  const nameOf = (frame: Runtime.CallFrame) => {
    const where = place(frame.url);
    return `${frame.functionName || '(anonymous)'}${where ? ` ${where}:${frame.lineNumber + 1}` : ''}`;
  };

  const byFunction = new Map<string, number>();
  const byArea = new Map<string, number>();
  const ownInclusive = new Map<string, number>();
  let idleMs = 0;
  let busyMs = 0;
  for (const [id, ms] of selfMs) {
    const frame = nodes.get(id)!.callFrame;
    if (frame.functionName === '(idle)') {
      idleMs += ms;
      continue;
    }
    busyMs += ms;
    const name = nameOf(frame);
    byFunction.set(name, (byFunction.get(name) ?? 0) + ms);
    const key = area(frame);
    byArea.set(key, (byArea.get(key) ?? 0) + ms);
    // Each of our functions on this stack gets the time once, however deep the recursion.
    const seen = new Set<string>();
    for (let at: number | undefined = id; at !== undefined; at = parents.get(at)) {
      const caller = nodes.get(at)!.callFrame;
      if (place(caller.url).startsWith('src/')) seen.add(nameOf(caller));
    }
    for (const own of seen) ownInclusive.set(own, (ownInclusive.get(own) ?? 0) + ms);
  }
  const ranked = (map: Map<string, number>) =>
    [...map]
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(([name, ms]) => ({ name, selfMs: Math.round(ms * 10) / 10, share: busyMs > 0 ? Math.round((ms / busyMs) * 1000) / 1000 : 0 }));
  return { busyMs: Math.round(busyMs), idleMs: Math.round(idleMs), functions: ranked(byFunction), areas: ranked(byArea), ownInclusive: ranked(ownInclusive) };
}

export function formatSummary(title: string, summary: ProfileSummary, rows = 12): string {
  const line = (spot: HotSpot) => `  ${(spot.share * 100).toFixed(1).padStart(5)} %  ${spot.name}`;
  return [
    `${title}: ${summary.busyMs} ms busy, ${summary.idleMs} ms idle (shares are of busy time)`,
    ' by area (self time):',
    ...summary.areas.slice(0, 8).map(line),
    ' by function (self time):',
    ...summary.functions.slice(0, rows).map(line),
    " Gatehouse's own functions (inclusive time):",
    ...summary.ownInclusive.slice(0, 8).map(line),
  ].join('\n');
}
