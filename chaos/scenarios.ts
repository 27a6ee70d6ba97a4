import { sleep } from "../bench/stats.ts";
import { answersToolResults } from "../test/support/fake-anthropic.ts";
import type { RoleProcess } from "./processes.ts";
import type { ChaosSystem } from "./system.ts";

/**
 * The production faults, one scenario each. A scenario drives the customers and the fault,
 * then says what it injected and by when the system must have answered everyone; the runner
 * counts what happened. Every scenario gets a fresh system (its own Postgres and Redis).
 */

/** Small, fast settings, the same for every scenario unless it says otherwise. */
export const COMMON_ENV: Readonly<Record<string, string>> = {
  JOB_ATTEMPTS: "4",
  RETRY_BASE_DELAY_MS: "500",
  JOB_LOCK_MS: "2000",
  GRAPH_TIMEOUT_MS: "1000",
  SEND_RECONCILE_WAIT_MS: "3000",
  REPLY_DEBOUNCE_MS: "200",
  RECONCILE_INTERVAL_MS: "2000",
  RECONCILE_AFTER_MS: "10000",
  // A reply's Claude call may answer until its deadline (law 4): start budget (2 × GRAPH_TIMEOUT_MS
  // + 5 s) + this + 1 s, about 16 s here; a takeover waits that long for a call in flight.
  ANTHROPIC_TIMEOUT_MS: "8000",
  REPLY_CONCURRENCY: "20",
  INBOUND_CONCURRENCY: "10",
  SHUTDOWN_TIMEOUT_MS: "2000",
};

const GRAPH_TIMEOUT_MS = Number(COMMON_ENV.GRAPH_TIMEOUT_MS);
const JOB_LOCK_MS = Number(COMMON_ENV.JOB_LOCK_MS);

export interface Injection {
  /** One line: what was done to the system, with the measured times. */
  note: string;
  /** The scenario is over by then, settled or not (ms since the epoch). */
  deadline: number;
  /** Claude calls paid twice because of the fault itself (a worker killed mid-call: its answer is never read). */
  claudeAllowance?: number;
}

export interface Scenario {
  id: number;
  slug: string;
  workers: number;
  claudeLatencyMs: number;
  /** Share of customer messages Meta delivers twice (default 0.1). */
  duplicateRate?: number;
  /** The number has the demo shop's tools (ChaosSystem.shop). */
  shop?: boolean;
  /** The most requests the shop may see with one Idempotency-Key (default 2: a request cut off, and its repeat). */
  keySightings?: number;
  env?: Record<string, string>;
  run(system: ChaosSystem): Promise<Injection>;
}

const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

/** Polls `probe` until it returns a value (not undefined/false); undefined after `timeoutMs`. */
async function waitFor<T>(probe: () => T | undefined | false, timeoutMs: number, pollMs = 10): Promise<T | undefined> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = probe();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) return undefined;
    await sleep(pollMs);
  }
}

/**
 * `customers` write, 100 ms apart; then the worker process with Claude calls in flight, once
 * they have been in flight for a moment, and how many (undefined when none ever started).
 */
async function workerAskingClaude(system: ChaosSystem, customers: number): Promise<{ victim: RoleProcess; calls: number } | undefined> {
  for (let i = 0; i < customers; i++) {
    system.customers.write(i);
    await sleep(100);
  }
  const via = await waitFor(() => [...system.claudeInFlight].find(([v, n]) => n > 0 && v.startsWith("w"))?.[0], 15_000);
  const victim = via ? system.processOf(via) : undefined;
  if (!via || !victim) return undefined;
  await sleep(300);
  return { victim, calls: system.claudeInFlight.get(via) ?? 0 };
}

/** Claude books a fitting for every message that asks for one (a tool_use of its own each), then confirms once told the result. */
function bookingClaude(system: ChaosSystem): void {
  let toolUses = 0;
  system.claude.answerFor = (request) => {
    if (answersToolResults(request)) return { text: "Booked, see you then!" };
    if (!/book/i.test(JSON.stringify(request.messages.at(-1)?.content))) return undefined;
    const input = { name: `Customer ${toolUses}`, date: "2026-12-19", time: "10:30", people: 2 };
    return { content: [{ type: "tool_use", id: `toolu_chaos${++toolUses}`, name: "book_fitting", input }], stopReason: "tool_use" };
  };
}

/** No Claude call of this worker in flight, and none answered in the last 300 ms (a step not yet stored dies with the process). */
const claudeQuiet = (system: ChaosSystem, via: string) =>
  (system.claudeInFlight.get(via) ?? 0) === 0 && Date.now() - (system.claudeAnsweredAt.get(via) ?? 0) >= 300;

/**
 * Up to `kills` times, as soon as `ready` picks a running worker (by its base path): told to
 * `onKill`, SIGKILLed, and a new worker started in its place. Stops early when none is ready
 * within `waitMs`; how many were killed, once their replacements run.
 */
async function killWorkersWhen(
  system: ChaosSystem,
  kills: number,
  ready: (via: string) => boolean,
  onKill?: (via: string) => void,
  waitMs = 30_000,
): Promise<number> {
  let killed = 0;
  const replacements: Promise<RoleProcess>[] = [];
  while (killed < kills) {
    const victim = await waitFor<RoleProcess>(() => system.runningWorkers.find((w) => ready(system.viaOf(w))), waitMs, 2);
    if (!victim) break;
    onKill?.(system.viaOf(victim));
    victim.signal("SIGKILL");
    killed++;
    await victim.exited;
    replacements.push(system.startWorker()); // meanwhile another worker may be caught too
  }
  await Promise.all(replacements);
  return killed;
}

const totalClaudeInFlight = (system: ChaosSystem) => [...system.claudeInFlight.values()].reduce((a, b) => a + b, 0);

export const SCENARIOS: Scenario[] = [
  {
    id: 1,
    slug: "postgres-down-2min",
    workers: 2,
    claudeLatencyMs: 300,
    async run(system) {
      const pg = system.pg!;
      for (let i = 0; i < 20; i++) {
        system.customers.write(i);
        await sleep(100);
      }
      await pg.crash();
      const down = Date.now();
      // The rest of the first wave, then customers keep writing through the outage.
      for (let i = 20; i < 30; i++) {
        system.customers.write(i);
        await sleep(100);
      }
      for (let i = 0; i < 20; i++) {
        await sleep(5000);
        system.customers.write(i, `Hello again, any news? (customer ${i})`);
      }
      await sleep(Math.max(0, down + 120_000 - Date.now()));
      await pg.resume();
      const outage = Date.now() - down;
      return {
        note: `Postgres crashed (pg_ctl -m immediate) after 20 of 30 customers had written; 10 + 20 more messages during the ${seconds(outage)} outage; JOB_ATTEMPTS=4`,
        deadline: Date.now() + 60_000,
      };
    },
  },
  {
    id: 2,
    slug: "postgres-down-mid-claude",
    workers: 2,
    claudeLatencyMs: 2000,
    async run(system) {
      const pg = system.pg!;
      for (let i = 0; i < 10; i++) {
        system.customers.write(i);
        await sleep(100);
      }
      await waitFor(() => totalClaudeInFlight(system) >= 5, 15_000);
      const inFlight = totalClaudeInFlight(system);
      await pg.crash();
      const down = Date.now();
      await sleep(40_000);
      await pg.resume();
      return {
        note: `10 customers; Postgres crashed with ${inFlight} Claude calls (2 s each) in flight, back after ${seconds(Date.now() - down)}`,
        deadline: Date.now() + 45_000,
      };
    },
  },
  {
    id: 3,
    slug: "send-timeout",
    workers: 2,
    claudeLatencyMs: 200,
    async run(system) {
      const customers = 5;
      // Meta takes each customer's first send but answers after the client gave up; the
      // `sent` status comes ~3 s after it took it. Meanwhile the customer writes again.
      system.graph.plan = (send) => (send.nthToRecipient === 0 ? { kind: "late", answerAfterMs: GRAPH_TIMEOUT_MS + 1000, statusAfterMs: 3000 } : undefined);
      const followUps: Promise<void>[] = [];
      system.graph.onTaken((send) => {
        if (send.fault !== "late") return;
        const i = system.customers.indexOf(send.to);
        followUps.push(sleep(1000).then(() => void system.customers.write(i, `And do you deliver? (customer ${i})`)));
      });
      for (let i = 0; i < customers; i++) {
        system.customers.write(i);
        await sleep(300);
      }
      const late = await waitFor(() => followUps.length >= customers && followUps.length, 30_000);
      await Promise.all(followUps);
      return {
        note: `${customers} customers; Meta took each first send but answered after GRAPH_TIMEOUT_MS (${GRAPH_TIMEOUT_MS} ms), status 3 s after; ${late ?? followUps.length} customers wrote again 1 s after`,
        deadline: Date.now() + 45_000,
      };
    },
  },
  {
    id: 4,
    slug: "send-502-html",
    workers: 2,
    claudeLatencyMs: 200,
    async run(system) {
      const customers = 5;
      // Meta takes each customer's first send, but its edge answers 502 with an HTML page.
      system.graph.plan = (send) => (send.nthToRecipient === 0 ? { kind: "html502", statusAfterMs: 2000 } : undefined);
      const followUps: Promise<void>[] = [];
      system.graph.onTaken((send) => {
        if (send.fault !== "html502") return;
        const i = system.customers.indexOf(send.to);
        followUps.push(sleep(500).then(() => void system.customers.write(i, `And do you deliver? (customer ${i})`)));
      });
      for (let i = 0; i < customers; i++) {
        system.customers.write(i);
        await sleep(300);
      }
      const bad = await waitFor(() => followUps.length >= customers && followUps.length, 30_000);
      await Promise.all(followUps);
      return {
        note: `${customers} customers; Meta took each first send but answered 502 with an HTML page, status 2 s after; ${bad ?? followUps.length} customers wrote again 0.5 s after`,
        deadline: Date.now() + 45_000,
      };
    },
  },
  {
    id: 5,
    slug: "worker-frozen-mid-claude",
    workers: 2,
    claudeLatencyMs: 3000,
    async run(system) {
      const customers = 4;
      const caught = await workerAskingClaude(system, customers);
      if (!caught) return { note: "no Claude call ever started: nothing frozen", deadline: Date.now() + 30_000 };
      const { victim, calls: frozenCalls } = caught;
      victim.signal("SIGSTOP");
      const frozenAt = Date.now();
      await sleep(1000);
      for (let i = 0; i < customers; i++) system.customers.write(i, `Also, can I pay by card? (customer ${i})`);
      await sleep(Math.max(0, frozenAt + 3.5 * JOB_LOCK_MS - Date.now()));
      victim.signal("SIGCONT");
      // The other worker took those conversations over and waits for the frozen calls (their
      // deadline); the woken worker stores the answers it was paid for, and they are sent: no
      // Claude call is paid twice.
      return {
        note: `${customers} customers, 2 workers; ${victim.name} SIGSTOPped with ${frozenCalls} Claude call(s) (3 s) in flight, for ${seconds(Date.now() - frozenAt)} (JOB_LOCK_MS ${JOB_LOCK_MS}); each customer wrote again meanwhile; then SIGCONT`,
        deadline: Date.now() + 60_000,
      };
    },
  },
  {
    id: 6,
    slug: "redis-killed",
    workers: 2,
    claudeLatencyMs: 300,
    async run(system) {
      const redis = system.redis!;
      let killedAt = 0;
      for (let k = 0; k < 40; k++) {
        if (k === 15) {
          await redis.kill();
          killedAt = Date.now();
        }
        system.customers.write(k % 20);
        await sleep(200);
      }
      await sleep(Math.max(0, killedAt + 5000 - Date.now()));
      await redis.resume();
      return {
        note: `20 customers writing 40 messages over 8 s; redis-server SIGKILLed (AOF, appendfsync always) after 15, restarted ${seconds(Date.now() - killedAt)} later; Meta redelivers what was refused`,
        deadline: Date.now() + 60_000,
      };
    },
  },
  {
    id: 7,
    slug: "worker-killed",
    workers: 2,
    claudeLatencyMs: 200,
    async run(system) {
      const customers = 8;
      // Sends take 600 ms (within GRAPH_TIMEOUT_MS): long enough to kill a worker mid-send.
      system.graph.plan = () => ({ kind: "slow", answerAfterMs: 600, statusAfterMs: 1000 });
      const writing = (async () => {
        for (let i = 0; i < customers; i++) {
          system.customers.write(i);
          await sleep(300);
        }
      })();
      // Kill a worker whose draft is stored and sent (Meta has taken it) but not yet recorded,
      // and which has no Claude answer of its own in flight or just received (a draft not yet
      // stored dies with the process: that second call would be the fault's, not the
      // system's): a crash whose retry should cost neither a second Claude call nor a second send.
      const victim = await waitFor<RoleProcess>(
        () =>
          system.runningWorkers.find((w) => {
            const via = system.viaOf(w);
            return system.graph.sendsInFlight(via) > 0 && claudeQuiet(system, via);
          }),
        20_000,
        2,
      );
      victim?.signal("SIGKILL");
      await writing;
      await victim?.exited;
      const replacement = await system.startWorker();
      for (let i = 0; i < customers; i++) {
        system.customers.write(i, `One more question, customer ${i}: do you have gift cards?`);
        await sleep(300);
      }
      return {
        note: victim
          ? `${customers} customers, 2 workers, sends take 600 ms; ${victim.name} SIGKILLed mid-send (Meta had taken it); ${replacement.name} started; each customer wrote again`
          : "no worker was ever caught mid-send: nothing killed",
        deadline: Date.now() + 60_000,
      };
    },
  },
  {
    id: 8,
    slug: "worker-killed-mid-claude",
    workers: 2,
    claudeLatencyMs: 3000,
    async run(system) {
      const customers = 4;
      const caught = await workerAskingClaude(system, customers);
      if (!caught) return { note: "no Claude call ever started: nothing killed", deadline: Date.now() + 30_000 };
      const { victim, calls: killedCalls } = caught;
      victim.signal("SIGKILL");
      const killedAt = Date.now();
      await victim.exited;
      const replacement = await system.startWorker();
      // Nobody will read the killed calls' answers: the takeover waits out their deadline, then
      // asks Claude itself, once each.
      return {
        note: `${customers} customers, 2 workers, Claude 3 s; ${victim.name} SIGKILLed with ${killedCalls} Claude call(s) in flight; ${replacement.name} started ${seconds(Date.now() - killedAt)} later`,
        deadline: Date.now() + 60_000,
        claudeAllowance: killedCalls,
      };
    },
  },
  {
    id: 9,
    slug: "worker-killed-mid-tool",
    workers: 2,
    claudeLatencyMs: 200,
    shop: true,
    async run(system) {
      const shop = system.shop!;
      const customers = 20;
      const kills = 8;
      const holdMs = 700;
      bookingClaude(system);
      // The shop takes its time over each request, then acts and answers (to nobody, if the caller died meanwhile).
      const inFlight = new Map<string, Set<string>>(); // base path → keys the shop holds for it
      const seen = new Map<string, number>();
      shop.fault = async ({ authorization, idempotencyKey: key = "" }) => {
        const via = authorization?.replace(/^Bearer /, "") ?? "";
        seen.set(key, (seen.get(key) ?? 0) + 1);
        const keys = inFlight.get(via) ?? new Set();
        inFlight.set(via, keys.add(key));
        await sleep(holdMs);
        keys.delete(key);
        return undefined;
      };
      let writing = true;
      const writer = (async () => {
        for (let n = 0; writing && n < 200; n++) {
          system.customers.write(n % customers, `Could you book a fitting for two on the 19th? (customer ${n % customers}, message ${n})`);
          await sleep(500);
        }
      })();
      // Kill a worker the shop is holding a request for, whose key it has seen once only (so no
      // key is cut off twice), and which has no Claude answer in flight or just received (a
      // step not yet stored dies with the process: that second call would be the fault's).
      let keysCut = 0;
      const killed = await killWorkersWhen(
        system,
        kills,
        (via) => {
          const keys = [...(inFlight.get(via) ?? [])];
          return keys.length > 0 && keys.every((k) => seen.get(k) === 1) && claudeQuiet(system, via);
        },
        (via) => (keysCut += inFlight.get(via)?.size ?? 0),
        20_000,
      );
      writing = false;
      await writer;
      return {
        note: `${customers} customers asking for bookings (one tool call each, the shop answering after ${holdMs} ms), 2 workers; ${killed} times a worker SIGKILLed while the shop held its request (${keysCut} keys cut off), a new worker started each time; the customers wrote until then`,
        deadline: Date.now() + 60_000,
      };
    },
  },
  {
    id: 10,
    slug: "business-acts-then-hangs",
    workers: 2,
    claudeLatencyMs: 200,
    shop: true,
    // The first request of each key hangs past the tool's timeout; its repeats, with the same
    // key, are answered from what the shop did. A few repeats per key, within TOOL_MAX_MS.
    keySightings: 6,
    env: { TOOL_MAX_MS: "15000" },
    async run(system) {
      const shop = system.shop!;
      const customers = 12;
      const kills = 4;
      bookingClaude(system);
      // The business books on the first request of each key and then never answers it (the
      // booking is made: only the answer is lost); a repeat with the key gets the booking back.
      const hungAt = new Map<string, number>(); // base path → when the shop last hung a request of it
      const seen = new Set<string>();
      shop.fault = ({ path, authorization, idempotencyKey: key = "" }) => {
        if (path !== "/bookings" || seen.has(key)) return undefined;
        seen.add(key);
        hungAt.set(authorization?.replace(/^Bearer /, "") ?? "", Date.now());
        return { actThenHang: true };
      };
      let writing = true;
      const writer = (async () => {
        // Every customer asks twice at least, and on until the last worker is killed.
        for (let n = 0; (writing || n < 2 * customers) && n < 120; n++) {
          system.customers.write(n % customers, `Could you book a fitting for two on the 19th? (customer ${n % customers}, message ${n})`);
          await sleep(700);
        }
      })();
      // Kill a worker while the shop holds a request it acted on (before the tool's timeout, so
      // the killed worker never learned of it), with no Claude answer of its own in flight or just received.
      const killed = await killWorkersWhen(system, kills, (via) => {
        const hung = Date.now() - (hungAt.get(via) ?? 0);
        return hung >= 300 && hung < 1500 && claudeQuiet(system, via);
      });
      writing = false;
      await writer;
      return {
        note: `${customers} customers asking for bookings, 2 workers; the shop books on each key's first request and never answers it (past the tool's 2 s timeout); ${killed} times a worker SIGKILLed while the shop held such a request, a new worker started each time`,
        deadline: Date.now() + 90_000,
      };
    },
  },
];
