import { createHash, randomBytes } from "node:crypto";
import { hash, verify } from "@node-rs/argon2";
import { z } from "zod";
import type { Db } from "../db/client.ts";
import { StaffRole } from "../generated/prisma/client.ts";

/**
 * Support staff accounts and their browser sessions. Passwords are argon2id hashes. A role
 * says what a person may see: "staff" work the dead-letter queue; "operator"s also see the
 * queues themselves (bull-board), whose job payloads carry message text and phone numbers.
 */

const STAFF_ROLES: readonly StaffRole[] = Object.values(StaffRole);

export const MIN_PASSWORD_LENGTH = 12;
export const SESSION_TTL_MS = 12 * 60 * 60 * 1000;

const email = z.email();

export class StaffInputError extends Error {
  override readonly name = "StaffInputError";
}

export function parseStaffRole(value: string): StaffRole {
  const role = STAFF_ROLES.find((r) => r === value.trim().toLowerCase());
  if (!role) throw new StaffInputError(`"${value}" is not a role: use ${STAFF_ROLES.join(" or ")}`);
  return role;
}

export async function addStaff(db: Db, address: string, password: string, role: StaffRole = "staff"): Promise<{ id: string; email: string; role: StaffRole }> {
  const parsed = email.safeParse(address.trim().toLowerCase());
  if (!parsed.success) throw new StaffInputError(`"${address}" is not an email address`);
  if (password.length < MIN_PASSWORD_LENGTH) throw new StaffInputError(`the password must be at least ${MIN_PASSWORD_LENGTH} characters`);
  const existing = await db.staffMember.findUnique({ where: { email: parsed.data } });
  if (existing) throw new StaffInputError(`${parsed.data} already has an account`);
  return db.staffMember.create({ data: { email: parsed.data, passwordHash: await hash(password), role }, select: { id: true, email: true, role: true } });
}

/** Takes effect on the person's open sessions at once: every request reads the role afresh. */
export async function setStaffRole(db: Db, address: string, role: StaffRole): Promise<boolean> {
  const changed = await db.staffMember.updateMany({ where: { email: address.trim().toLowerCase() }, data: { role } });
  return changed.count > 0;
}

/** Disabling also ends every session the person has open. */
export async function disableStaff(db: Db, address: string, now: Date): Promise<boolean> {
  const member = await db.staffMember.findUnique({ where: { email: address.trim().toLowerCase() } });
  if (!member) return false;
  await db.$transaction([
    db.staffMember.update({ where: { id: member.id }, data: { disabledAt: now } }),
    db.staffSession.deleteMany({ where: { staffId: member.id } }),
  ]);
  return true;
}

export function listStaff(db: Db) {
  return db.staffMember.findMany({ orderBy: { email: "asc" }, select: { email: true, role: true, disabledAt: true, createdAt: true } });
}

/** Verifies against a real hash even for an unknown email, so timing does not reveal who has an account. */
const DUMMY_HASH = hash("no such account, but the same work");

export async function authenticate(db: Db, address: string, password: string): Promise<{ id: string; email: string } | null> {
  const member = await db.staffMember.findUnique({ where: { email: address.trim().toLowerCase() } });
  const ok = await verify(member?.passwordHash ?? (await DUMMY_HASH), password).catch(() => false);
  return ok && member && !member.disabledAt ? { id: member.id, email: member.email } : null;
}

const tokenHash = (token: string) => createHash("sha256").update(token).digest("hex");

/**
 * Each sign-in also deletes every expired session, anyone's: findSession ignores them, and
 * nothing else would ever remove a session its owner never signed out of. The expires_at
 * index keeps that cheap however many sessions there are.
 */
export async function createSession(db: Db, staffId: string, now: Date): Promise<{ token: string; csrfToken: string; expiresAt: Date }> {
  const token = randomBytes(32).toString("base64url");
  const csrfToken = randomBytes(32).toString("base64url");
  const expiresAt = new Date(now.getTime() + SESSION_TTL_MS);
  await db.$transaction([
    db.staffSession.deleteMany({ where: { expiresAt: { lte: now } } }),
    db.staffSession.create({ data: { tokenHash: tokenHash(token), staffId, csrfToken, expiresAt } }),
  ]);
  return { token, csrfToken, expiresAt };
}

export async function findSession(db: Db, token: string, now: Date): Promise<{ id: string; email: string; role: StaffRole; csrfToken: string } | null> {
  const session = await db.staffSession.findUnique({ where: { tokenHash: tokenHash(token) }, include: { staff: true } });
  if (!session || session.expiresAt <= now || session.staff.disabledAt) return null;
  return { id: session.id, email: session.staff.email, role: session.staff.role, csrfToken: session.csrfToken };
}

/**
 * Which of these sessions (by id) still let their holder in, as findSession decides: not signed
 * out, not expired, their person not disabled. One query for any number of them.
 */
export async function liveSessionIds(db: Db, ids: readonly string[], now: Date): Promise<Set<string>> {
  if (ids.length === 0) return new Set();
  const live = await db.staffSession.findMany({ where: { id: { in: [...ids] }, expiresAt: { gt: now }, staff: { disabledAt: null } }, select: { id: true } });
  return new Set(live.map((session) => session.id));
}

export async function endSession(db: Db, token: string): Promise<void> {
  await db.staffSession.deleteMany({ where: { tokenHash: tokenHash(token) } });
}
