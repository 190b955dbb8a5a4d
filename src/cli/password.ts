/**
 * Secrets given on the command line, never as an option's value (which shell history and `ps`
 * would keep): the password of `gatehouse user create` and `user set-password`, and the client
 * secret of `gatehouse connection create|update` — from standard input, or prompted for
 * without echo.
 */
import { createInterface } from 'node:readline';
import { UsageError } from './command.ts';

export async function readPassword(options: { 'password-stdin'?: boolean }): Promise<string> {
  if (options['password-stdin']) return (await readStdin()).replace(/\r?\n$/, '');
  if (!process.stdin.isTTY) throw new UsageError('no terminal to prompt for the password: pass it on standard input with --password-stdin');
  const first = await prompt('Password: ');
  const second = await prompt('Repeat password: ');
  if (first !== second) throw new UsageError('the passwords do not match');
  return first;
}

/**
 * The client secret a provider gave: from standard input with --client-secret-stdin, else
 * prompted for once (it is pasted, not typed). White space around it is dropped: providers'
 * secrets have none, and a stray line end would only fail later, at the provider.
 */
export async function readClientSecret(options: { 'client-secret-stdin'?: boolean }): Promise<string> {
  if (!options['client-secret-stdin'] && !process.stdin.isTTY)
    throw new UsageError('no terminal to prompt for the client secret: pass it on standard input with --client-secret-stdin');
  const secret = (options['client-secret-stdin'] ? await readStdin() : await prompt('Client secret: ')).trim();
  if (secret === '') throw new UsageError('no client secret given: pass the one the provider gave on standard input with --client-secret-stdin');
  return secret;
}

/** Standard input, to its end. */
async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

/** Asks on the terminal without echoing what is typed. */
function prompt(question: string): Promise<string> {
  return new Promise((resolve) => {
    const rl = createInterface({ input: process.stdin, output: process.stdout, terminal: true });
    const output = rl as unknown as { _writeToOutput: (s: string) => void };
    rl.question(question, (answer) => {
      rl.close();
      process.stdout.write('\n');
      resolve(answer);
    });
    output._writeToOutput = () => {};
  });
}
