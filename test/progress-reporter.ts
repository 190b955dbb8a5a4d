/**
 * A progress line for `npm test` (test/run.ts), on standard error beside the spec reporter's
 * output: one line as each test file finishes — how many of the files queued so far are done,
 * whether this one passed, and how long the run has taken — so a long run says where it is.
 * Node's runner reports a file as a test at nesting 0 named by the file's path.
 */
interface FileEvent {
  type: string;
  data: { name: string; nesting: number; file?: string; details?: { passed?: boolean } };
}

export default async function* progress(source: AsyncIterable<FileEvent>): AsyncGenerator<string> {
  const started = Date.now();
  const queued = new Set<string>();
  let done = 0;
  let failed = 0;
  for await (const { type, data } of source) {
    // The file's own test is named by its path as the runner found it.
    const isFile = data.nesting === 0 && typeof data.name === 'string' && data.name.endsWith('.test.ts') && data.file?.endsWith(data.name) === true;
    if (!isFile) continue;
    if (type === 'test:enqueue') queued.add(data.file!);
    if (type !== 'test:complete') continue;
    done++;
    if (data.details?.passed === false) failed++;
    const seconds = Math.round((Date.now() - started) / 1000);
    const verdict = data.details?.passed === false ? 'FAILED' : 'ok';
    yield `[${done}/${queued.size} files, ${failed} failed, ${Math.floor(seconds / 60)}m${String(seconds % 60).padStart(2, '0')}s] ${verdict} ${data.file!.replace(`${process.cwd()}/`, '')}\n`;
  }
}
