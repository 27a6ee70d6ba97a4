import type { Clock } from "../clock.ts";
import type { CsatSettings } from "../config/config.ts";
import type { Db } from "../db/client.ts";
import { Postpone } from "../errors.ts";
import type { Logger } from "../logger.ts";
import { csatInteractive } from "../messages/csat.ts";
import { type Queues, scheduleCsatJob, scheduleReply } from "../queue/queues.ts";
import { askCsat, scheduleCsatAsk } from "../state/csat.ts";
import type { Processor } from "./processor.ts";

/**
 * Asking the customer how it went (issue 33.3). When the bot's answer is sent, an ask is
 * stored in Postgres (state/csat.ts), due CSAT_AFTER_SECONDS later, and a delayed job wakes it
 * then; the reconciler sends an ask whose job was lost or fell due while the workers were down
 * (src/jobs/reconcile.ts). Either way the ask becomes one reply of kind "csat", sent by the reply
 * job like any other (law 5), at most once: only one run moves an ask out of pending.
 */

export interface CsatDeps {
  db: Db;
  queues: Queues;
  logger: Logger;
  clock: Clock;
}

/**
 * CSAT as the jobs use it, its settings (CSAT_AFTER_SECONDS and the rest; undefined: off)
 * given once at start: an ask planned when the bot has answered, an ask run when it falls due.
 */
export class CsatAsks {
  constructor(
    private readonly deps: CsatDeps,
    private readonly csat: CsatSettings | undefined,
  ) {}

  /** Whether customers are asked at all (CSAT_AFTER_SECONDS set). */
  get enabled(): boolean {
    return this.csat !== undefined;
  }

  /** The bot's answer was sent: the customer is asked once they have been quiet for a while. Best effort: the answer is sent whatever happens here. */
  async plan(conversationId: string, log: Logger): Promise<void> {
    if (!this.csat) return;
    const { deps } = this;
    const now = deps.clock.now();
    try {
      const ask = await scheduleCsatAsk(deps.db, conversationId, now, new Date(now.getTime() + this.csat.afterMs));
      // Lost (Redis away), the reconciler finds the ask in Postgres once it is due.
      await scheduleCsatJob(deps.queues, ask.id, ask.dueAt, now);
    } catch (error) {
      log.warn({ event: "csat.schedule_failed", err: error }, "could not schedule the CSAT ask; the reconciler sends it if it was stored");
    }
  }

  /** One ask, due or not: asked (its reply job scheduled), cancelled or skipped with the reason, each logged. */
  async run(askId: string) {
    const { deps, csat } = this;
    const log = deps.logger.child({ csat: askId });
    if (!csat) {
      // CSAT_AFTER_SECONDS was unset since the ask was stored: it is left pending, never sent.
      log.info({ event: "csat.disabled" }, "CSAT is off; the ask is not sent");
      return { outcome: "disabled" as const };
    }
    const asked = await askCsat(deps.db, askId, { everyDays: csat.everyDays, question: csat.question, interactive: csatInteractive(csat) }, deps.clock.now());
    if (asked.outcome === "sent") {
      await scheduleReply(deps.queues, asked.conversationId, 0);
      log.info({ event: "csat.asked", conversation: asked.conversationId, reply: asked.replyId }, "CSAT ask sent to the reply job");
    } else if (asked.outcome === "cancelled" || asked.outcome === "skipped") {
      log.info({ event: `csat.${asked.outcome}`, conversation: asked.conversationId, reason: asked.reason }, "CSAT ask not sent");
    }
    return asked;
  }
}

export function csatProcessor(asks: CsatAsks): Processor<"csat"> {
  return {
    run: async (job) => {
      const outcome = await asks.run(job.data.askId);
      // Moved later by another answer: this run waits for the new time (its own job wakes it too; one of them asks).
      if (outcome.outcome === "not_due") throw new Postpone(outcome.dueAt.getTime(), "the CSAT ask was moved later");
      return outcome.outcome;
    },
  };
}
