import type { FastifyBaseLogger, FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { z } from "zod";
import type { Clock } from "../clock.ts";
import { safeEqual } from "../crypto/safe-equal.ts";
import type { Db } from "../db/client.ts";
import type { RedisClient } from "../queue/redis.ts";
import { authenticate, createSession, endSession, findSession, SESSION_TTL_MS } from "../staff/accounts.ts";
import { PUBLIC_ROUTES } from "./page.ts";
import { answer, problem, publicRoute, requestPart, type StaffApp, staffRoute, type ZodParts } from "./schema.ts";

/**
 * Who is acting on /admin: automation with the ADMIN_TOKEN bearer (attributed as "api"), or a
 * person signed in with a session cookie (httpOnly, SameSite=Strict), whose changes must also
 * carry the session's CSRF token in X-CSRF-Token. Failed sign-in attempts are rate limited.
 * `request.operator` says whether the actor may see what only operators see.
 */

const API_ACTOR = "api";
export const SESSION_COOKIE = "wa_staff";
export const CSRF_HEADER = "X-CSRF-Token";
/**
 * Failed attempts per email from one address, and per address, in a 15-minute window. The email's
 * limit is per address too: counted per email alone, anyone could lock every staff member out
 * by guessing wrong five times for each; this way an attacker locks out only themselves.
 */
const SIGN_IN_LIMIT = { perEmailAndAddress: 5, perAddress: 20, windowMs: 15 * 60 * 1000 };

declare module "fastify" {
  interface FastifyRequest {
    /** "api" or the signed-in person's email; set for every authenticated /admin request. */
    actor: string;
    /** May see the queues themselves: automation with the ADMIN_TOKEN, or a person with the operator role. */
    operator: boolean;
    /** The signed-in person's session (its row's id); null for the bearer, which has none. */
    sessionId: string | null;
  }
}

export interface StaffAuthDeps {
  db: Db;
  redis: RedisClient;
  keyPrefix: string;
  adminToken: string;
  secureCookies: boolean;
  clock: Clock;
  /** A session was signed out here: what this process holds for it (its live-queue streams) ends now. */
  signedOut?: (sessionId: string) => void;
}

/** What anyone may call without signing in: signing in, and the page shell. */
export const isPublicRoute = (method: string, url: string | undefined) => {
  const route = `${method} ${url}`;
  return route === "POST /admin/session" || PUBLIC_ROUTES.has(route);
};

const signInBody = requestPart(z.object({ email: z.string().min(1).max(320), password: z.string().min(1).max(1000) }).strict(), {
  status: 400,
  error: "body must be { email, password }",
});
const SESSION = ["session"];

function cookieValue(header: string | undefined, name: string): string | undefined {
  for (const part of (header ?? "").split(";")) {
    const [key, ...rest] = part.trim().split("=");
    if (key === name) return rest.join("=");
  }
  return undefined;
}

export function registerStaffAuth(scope: FastifyInstance, deps: StaffAuthDeps): void {
  const app = scope.withTypeProvider<ZodParts>();
  app.decorateRequest("actor", "");
  app.decorateRequest("operator", false);
  app.decorateRequest("sessionId", null);
  app.addHook("onRequest", async (request, reply) => authenticateRequest(deps, request, reply));
  registerSignIn(app, deps);
  registerSession(app, deps);
}

const setCookie = (deps: StaffAuthDeps, reply: FastifyReply, value: string, maxAgeS: number) =>
  reply.header("set-cookie", `${SESSION_COOKIE}=${value}; Path=/admin; HttpOnly; SameSite=Strict; Max-Age=${maxAgeS}${deps.secureCookies ? "; Secure" : ""}`);

/** Who is acting: the bearer (an operator), or a signed-in person whose change carries the session's CSRF token. */
async function authenticateRequest(deps: StaffAuthDeps, request: FastifyRequest, reply: FastifyReply) {
  if (isPublicRoute(request.method, request.routeOptions.url)) return;
  const header = request.headers.authorization ?? "";
  if (header.startsWith("Bearer ")) {
    if (safeEqual(header.slice("Bearer ".length), deps.adminToken)) {
      request.actor = API_ACTOR;
      request.operator = true;
      return;
    }
    return unauthorized(reply);
  }
  const token = cookieValue(request.headers.cookie, SESSION_COOKIE);
  const session = token ? await findSession(deps.db, token, deps.clock.now()) : null;
  if (!session) return unauthorized(reply);
  // A cookie rides along with any request the browser makes; a change must prove it came from our page.
  if (request.method !== "GET" && request.method !== "HEAD") {
    const csrf = request.headers[CSRF_HEADER.toLowerCase()];
    if (typeof csrf !== "string" || !safeEqual(csrf, session.csrfToken)) {
      return reply.code(403).send({ error: `missing or wrong ${CSRF_HEADER}` });
    }
  }
  request.actor = session.email;
  request.operator = session.role === "operator";
  request.sessionId = session.id;
}

function registerSignIn(app: StaffApp, deps: StaffAuthDeps): void {
  app.post(
    "/admin/session",
    {
      schema: publicRoute({
        operationId: "signIn",
        summary: "Sign in: sets the session cookie and returns the CSRF token every change must carry",
        tags: SESSION,
        body: signInBody,
        response: {
          200: answer(z.object({ email: z.string(), csrfToken: z.string(), expiresAt: z.iso.datetime() }), `signed in; the ${SESSION_COOKIE} cookie is set`),
          400: problem("a body other than { email, password }, or malformed JSON"),
          401: problem("wrong email or password"),
          429: problem("too many attempts from this address (with `Retry-After`)"),
        },
      }),
    },
    async (request, reply) => {
      const email = request.body.email.trim().toLowerCase();
      // request.ip is the client's own address when TRUST_PROXY names the load balancer.
      const counters = [`email:${encodeURIComponent(email)}:${request.ip}`, `ip:${request.ip}`];
      const [forEmail = 0, forAddress = 0] = await reserveSignInAttempt(deps, counters);
      if (forEmail > SIGN_IN_LIMIT.perEmailAndAddress || forAddress > SIGN_IN_LIMIT.perAddress) {
        await refundSignInAttempt(deps, counters, request.log);
        request.log.warn({ event: "staff.sign_in_limited" }, "too many sign-in attempts");
        return reply
          .code(429)
          .header("retry-after", String(SIGN_IN_LIMIT.windowMs / 1000))
          .send({ error: "too many attempts; try again later" });
      }
      let staff: Awaited<ReturnType<typeof authenticate>>;
      try {
        staff = await authenticate(deps.db, email, request.body.password);
      } catch (error) {
        // The database failed, not the person: that attempt proved nothing either way.
        await refundSignInAttempt(deps, counters, request.log);
        throw error;
      }
      if (!staff) {
        request.log.info({ event: "staff.sign_in_failed" }, "sign-in refused");
        return reply.code(401).send({ error: "wrong email or password" });
      }
      // Only failures count: staff who sign in often from one office are never locked out.
      await refundSignInAttempt(deps, counters, request.log);
      const session = await createSession(deps.db, staff.id, deps.clock.now());
      request.log.info({ event: "staff.signed_in", staff: staff.email }, "signed in");
      setCookie(deps, reply, session.token, SESSION_TTL_MS / 1000);
      return { email: staff.email, csrfToken: session.csrfToken, expiresAt: session.expiresAt };
    },
  );
}

function registerSession(app: StaffApp, deps: StaffAuthDeps): void {
  app.get(
    "/admin/session",
    {
      schema: staffRoute("GET", {
        operationId: "whoAmI",
        summary: "Who is acting, with the session's CSRF token",
        tags: SESSION,
        response: {
          200: answer(
            z.object({
              email: z.string().describe(`the person's, or \`${API_ACTOR}\` for the bearer`),
              csrfToken: z.string().optional(),
              operator: z.boolean().describe("may see the queues and try the bot (the bearer, or the operator role)"),
            }),
            "the actor",
          ),
        },
      }),
    },
    async (request) => {
      if (request.actor === API_ACTOR) return { email: API_ACTOR, operator: true };
      const session = await findSession(deps.db, cookieValue(request.headers.cookie, SESSION_COOKIE) ?? "", deps.clock.now());
      return { email: request.actor, csrfToken: session?.csrfToken, operator: request.operator };
    },
  );

  app.delete(
    "/admin/session",
    {
      schema: staffRoute("DELETE", {
        operationId: "signOut",
        summary: "Sign out: ends the session and clears its cookie",
        tags: SESSION,
        response: { 200: answer(z.object({ ok: z.literal(true) }), "signed out") },
      }),
    },
    async (request, reply) => {
      const token = cookieValue(request.headers.cookie, SESSION_COOKIE);
      if (token) await endSession(deps.db, token);
      if (request.sessionId) deps.signedOut?.(request.sessionId);
      setCookie(deps, reply, "", 0);
      return { ok: true };
    },
  );
}

function unauthorized(reply: FastifyReply) {
  return reply.code(401).header("www-authenticate", "Bearer").send({ error: "unauthorized" });
}

/**
 * Reserves one attempt on each counter and returns the counts, this attempt included. The
 * attempt counts before the password is checked, so concurrent guesses cannot all slip under
 * the limit; it is handed back (`refundSignInAttempt`) unless the password was wrong.
 * INCR and PEXPIRE ... NX (Redis 7) go in one MULTI, so no crash or error between them can
 * leave a counter that never expires (a lockout for good); NX starts the window only on a
 * counter that has none, which also repairs such a counter. One key per command, all under
 * the queue prefix's hash tag: one slot in a Redis Cluster.
 */
async function reserveSignInAttempt(deps: StaffAuthDeps, counters: string[]): Promise<number[]> {
  const multi = deps.redis.multi();
  for (const counter of counters) {
    const key = signInKey(deps, counter);
    multi.incr(key).pexpire(key, SIGN_IN_LIMIT.windowMs, "NX");
  }
  const replies = await multi.exec();
  if (!replies) throw new Error("sign-in counters: MULTI was aborted");
  const failed = replies.find(([error]) => error);
  if (failed) throw failed[0];
  // Replies alternate: INCR's count, then PEXPIRE's 0 or 1.
  return replies.filter((_, index) => index % 2 === 0).map(([, count]) => Number(count));
}

/**
 * Takes back a reserved attempt. A counter whose window ended meanwhile is left alone: a bare
 * DECR would create it again, negative and without an expiry. Should Redis fail here, the
 * attempt stays counted (it still expires with its window) rather than fail the request.
 */
const REFUND_SCRIPT = `for _, key in ipairs(KEYS) do
  if redis.call("EXISTS", key) == 1 then redis.call("DECR", key) end
end
return 0`;

async function refundSignInAttempt(deps: StaffAuthDeps, counters: string[], log: FastifyBaseLogger): Promise<void> {
  try {
    await deps.redis.eval(REFUND_SCRIPT, counters.length, ...counters.map((counter) => signInKey(deps, counter)));
  } catch (error) {
    log.warn({ event: "staff.sign_in_refund_failed", err: error }, "a sign-in attempt stays counted");
  }
}

const signInKey = (deps: StaffAuthDeps, counter: string) => `${deps.keyPrefix}:signin:${counter}`;
