/** Small pieces shared by the people's pages: the admin console, the account pages and setup. */
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { User } from '../accounts/users.ts';
import { single, type RawParams } from '../protocol/params.ts';
import type { PageCursor } from '../clients/clients.ts';
import { formToken } from './session.ts';

declare module 'fastify' {
  interface FastifyReply {
    /** Data @fastify/view merges into every template this reply renders, layout included. */
    locals: Record<string, unknown> | null;
  }
}

/** Route options of a page: errors render the error page instead of JSON. */
export const page = { config: { page: true } } as const;

/** A text field; '' when absent. A repeated field is `invalid_request`, as everywhere. */
export function field(body: RawParams, name: string): string {
  return single(body, name) ?? '';
}

/** A checkbox: present means ticked. */
export function ticked(body: RawParams, name: string): boolean {
  return single(body, name) !== undefined;
}

/** A group of checkboxes sharing one name: every ticked value. */
export function tickedValues(body: RawParams, name: string): string[] {
  const value = body[name];
  return value === undefined ? [] : (Array.isArray(value) ? value : [value]).filter((v) => v !== '');
}

/** Sends a visitor who is not logged in to the login page, to come back here afterwards. */
export function toLogin(request: FastifyRequest, reply: FastifyReply, back: string): FastifyReply {
  return reply.redirect(`/login?${new URLSearchParams({ next: request.method === 'GET' ? request.url : back })}`, 303);
}

/**
 * What the layout's navigation needs; set on `reply.locals` so every page of a signed-in
 * person shows where else to go and how to log out.
 */
export function navigation(request: FastifyRequest, reply: FastifyReply, user: User): void {
  const nav = { username: user.username, admin: user.is_admin === 1, csrfToken: formToken(reply), current: request.url.split('?')[0] };
  reply.locals = { ...reply.locals, nav };
}

/** A time for people: "2026-11-22 14:03 UTC". */
export function formatTime(epochMs: number): string {
  return `${new Date(epochMs).toISOString().slice(0, 16).replace('T', ' ')} UTC`;
}

/** "username must be …" → "Username must be …": a library message shown next to its field. */
export function sentence(message: string): string {
  return message.charAt(0).toUpperCase() + message.slice(1);
}

/**
 * The page a list's link leads to: `?after=<key>` (the next page) or `?before=<key>` (the
 * previous one), else the first. Any other value is only a key that no row has: an empty page.
 */
export function pageCursor(query: RawParams): PageCursor {
  const after = single(query, 'after');
  if (after !== undefined) return { after: after.slice(0, 2048) };
  const before = single(query, 'before');
  return before === undefined ? {} : { before: before.slice(0, 2048) };
}
