/**
 * Loaded into a measured server's process (and each of its workers) by `npm run bench`,
 * through `NODE_OPTIONS=--import=<this file>`: it watches the process from inside, where the
 * bench cannot, and writes what it saw to BENCH_PROBE_DIR when the bench asks.
 *
 * - the event loop's delay (perf_hooks.monitorEventLoopDelay, 10 ms resolution): how long a
 *   callback that was due had to wait, i.e. how long something held the thread;
 * - the process's CPU time (process.cpuUsage: main thread, libuv's pool and V8's helpers)
 *   over wall time: the share of one core it used;
 * - with BENCH_TIMELINE=1, a timeline: garbage collections (PerformanceObserver 'gc'),
 *   Gatehouse's checkpoints and purge runs (the diagnostics channels `gatehouse:checkpoint`
 *   and `gatehouse:purge`, src/store/checkpointer.ts and src/store/purge.ts) and the event loop's
 *   worst delay per 100 ms, each with its time since the epoch (ms).
 *
 * SIGUSR2 (SIGUSR1 is the inspector's) closes a window: one JSON line with the window's
 * figures appended to `<dir>/<pid>.jsonl` (and the timeline's events to
 * `<dir>/<pid>.timeline.jsonl`), and a new window starts. The bench sends one before a
 * measured phase and one after it. Nothing here runs per request.
 */
import { appendFileSync } from 'node:fs';
import { join } from 'node:path';
import { subscribe } from 'node:diagnostics_channel';
import { constants, monitorEventLoopDelay, PerformanceObserver } from 'node:perf_hooks';
import { isMainThread } from 'node:worker_threads';

const directory = process.env.BENCH_PROBE_DIR;

// The main thread only: NODE_OPTIONS loads this into worker threads too (the checkpointer's),
// whose figures the process's CPU time already counts.
if (directory && isMainThread) {
  const now = () => performance.timeOrigin + performance.now();
  /** A histogram's nanoseconds as milliseconds, to 0.01. */
  const ms = (nanoseconds: number) => Math.round((nanoseconds / 1e6) * 100) / 100;
  const delay = monitorEventLoopDelay({ resolution: 10 });
  delay.enable();
  let windowStart = now();
  let cpuStart = process.cpuUsage();

  const events: object[] = [];
  if (process.env.BENCH_TIMELINE === '1') {
    const gcKinds: Record<number, string> = {
      [constants.NODE_PERFORMANCE_GC_MINOR]: 'minor',
      [constants.NODE_PERFORMANCE_GC_MAJOR]: 'major',
      [constants.NODE_PERFORMANCE_GC_INCREMENTAL]: 'incremental',
      [constants.NODE_PERFORMANCE_GC_WEAKCB]: 'weakcb',
    };
    new PerformanceObserver((list) => {
      for (const entry of list.getEntries()) {
        const kind = (entry as { detail?: { kind?: number } }).detail?.kind ?? -1;
        events.push({ type: 'gc', t: performance.timeOrigin + entry.startTime, ms: entry.duration, kind: gcKinds[kind] ?? String(kind) });
      }
    }).observe({ entryTypes: ['gc'] });
    for (const name of ['checkpoint', 'purge']) subscribe(`gatehouse:${name}`, (message) => events.push({ type: name, t: now(), ...(message as object) }));
    // The worst delay per 100 ms, from a second histogram (the window's own is left whole).
    const slices = monitorEventLoopDelay({ resolution: 10 });
    slices.enable();
    setInterval(() => {
      if (slices.count > 0) events.push({ type: 'loop', t: now(), maxMs: ms(slices.max) });
      slices.reset();
    }, 100).unref();
  }

  process.on('SIGUSR2', () => {
    const at = now();
    const cpu = process.cpuUsage(cpuStart);
    const wallMs = at - windowStart;
    const line = {
      pid: process.pid,
      from: windowStart,
      to: at,
      wallMs,
      cpuMs: (cpu.user + cpu.system) / 1000,
      cpuShare: (cpu.user + cpu.system) / 1000 / wallMs,
      loopDelay: delay.count > 0 ? { p50Ms: ms(delay.percentile(50)), p99Ms: ms(delay.percentile(99)), maxMs: ms(delay.max) } : null,
    };
    appendFileSync(join(directory, `${process.pid}.jsonl`), `${JSON.stringify(line)}\n`);
    if (events.length > 0) {
      appendFileSync(join(directory, `${process.pid}.timeline.jsonl`), events.map((e) => JSON.stringify(e)).join('\n') + '\n');
      events.length = 0;
    }
    delay.reset();
    windowStart = at;
    cpuStart = process.cpuUsage();
  });
}
