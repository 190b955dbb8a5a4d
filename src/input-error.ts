/**
 * A problem with what a person asked for — on a form or the command line — naming the field
 * at fault, so a page can show it next to that field and the CLI can print it as one line.
 * Each domain has its own subclass (AccountError, ClientInputError, ResourceInputError).
 */
export class InputError extends Error {
  override name = 'InputError';
  /** The form field the problem is about. */
  readonly field: string;
  constructor(field: string, message: string) {
    super(message);
    this.field = field;
  }
}

/**
 * At most `max` characters of `text`, whole ones (a surrogate pair is never split), with "…"
 * when cut: how a message or the audit trail repeats what somebody sent.
 */
export function cut(text: string, max: number): string {
  if (text.length <= max) return text;
  const characters = Array.from(text);
  return characters.length > max ? `${characters.slice(0, max).join('')}…` : text;
}
