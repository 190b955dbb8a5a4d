/** The password of `gatehouse user create` and `user set-password`: from standard input, or prompted for without echo. */
import { createInterface } from 'node:readline';
import { UsageError } from './command.ts';

export async function readPassword(options: { 'password-stdin'?: boolean }): Promise<string> {
  if (options['password-stdin']) {
    const chunks: Buffer[] = [];
    for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
    return Buffer.concat(chunks)
      .toString('utf8')
      .replace(/\r?\n$/, '');
  }
  if (!process.stdin.isTTY) throw new UsageError('no terminal to prompt for the password: pass it on standard input with --password-stdin');
  const first = await prompt('Password: ');
  const second = await prompt('Repeat password: ');
  if (first !== second) throw new UsageError('the passwords do not match');
  return first;
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
