import { randomUUID } from "node:crypto";
import type { ClaudeClient } from "../ai/claude.ts";
import { estimateCostUsd, greatestCostUsd } from "../ai/pricing.ts";
import type { Clock } from "../clock.ts";
import type { Db } from "../db/client.ts";
import { type KnowledgeBaseDeps, startKnowledgeBase } from "../knowledge/knowledge.ts";
import type { Logger } from "../logger.ts";
import type { Metrics } from "../metrics/metrics.ts";
import { countedClaudeCall } from "../state/claude-calls.ts";
import type { BusinessActions } from "../tools/actions.ts";
import type { BusinessTool } from "../tools/business-tool.ts";
import { type ConverseSettings, converse } from "./converse.ts";
import type { ToolStub } from "./file.ts";
import type { CallLedger } from "./memory.ts";
import { stubbedActions } from "./stubs.ts";

/**
 * The staff page's "Try it" (issue 34.2): a person writes as a customer of one number and reads
 * what the bot would answer, with why, what it would do and what it cost, through the same code
 * as an eval (converse.ts), nothing sent to WhatsApp and nothing stored as a conversation. A
 * tool a stub answers is not called; one whose request is a read (GET) runs for real; any other
 * is not run, and Claude is told so.
 */

export interface PlaygroundDeps {
  db: Db;
  logger: Logger;
  clock: Clock;
  claude: ClaudeClient;
  metrics: Pick<Metrics, "toolCalls">;
  actions: BusinessActions;
  businessTools: ReadonlyMap<string, readonly BusinessTool[]>;
}

export interface PlaygroundSettings extends ConverseSettings {
  knowledge: Pick<KnowledgeBaseDeps, "tokenBudget" | "limits" | "language">;
}

export interface PlayInput {
  phoneNumberId: string;
  turns: string[];
  tools?: Record<string, ToolStub[]> | undefined;
}

export class Playground {
  constructor(
    private readonly deps: PlaygroundDeps,
    private readonly settings: PlaygroundSettings,
  ) {}

  /** The numbers PHONE_NUMBERS_FILE lists: their tools' names, and whether they have knowledge. */
  numbers(): { phoneNumberId: string; tools: string[]; knowledge: boolean }[] {
    return [...this.settings.numbers].map(([phoneNumberId, number]) => ({
      phoneNumberId,
      tools: (this.deps.businessTools.get(phoneNumberId) ?? []).map((t) => t.name),
      knowledge: number.knowledgeDir !== undefined,
    }));
  }

  /** Whether the number is one PHONE_NUMBERS_FILE lists (without the file, any number is answered with the defaults). */
  knows(phoneNumberId: string): boolean {
    return this.settings.numbers.size === 0 || this.settings.numbers.has(phoneNumberId);
  }

  async play(input: PlayInput) {
    const { phoneNumberId } = input;
    const dir = this.settings.numbers.get(phoneNumberId)?.knowledgeDir;
    // The folder as it is now, read for this request alone: a file just changed is what is tried.
    const knowledge = dir
      ? await startKnowledgeBase({
          db: this.deps.db,
          logger: this.deps.logger,
          clock: this.deps.clock,
          dirs: new Map([[phoneNumberId, dir]]),
          readOnly: true,
          ...this.settings.knowledge,
        })
      : undefined;
    try {
      const actions = stubbedActions(this.deps.actions, input.tools ?? {}, {
        live: "reads",
        methodOf: (number, name) => this.deps.businessTools.get(number)?.find((t) => t.name === name)?.request.method,
      });
      const ledger = playgroundLedger(this.deps, this.settings, phoneNumberId);
      const answers = await converse({ ...this.deps, actions, knowledge, graph: NO_MEDIA, ledger }, this.settings, phoneNumberId, "playground", input.turns);
      const usage = answers.flatMap((a) => a.usage);
      const costs = usage.map((u) => estimateCostUsd(u.model, u, this.settings.modelPrices));
      return {
        answers: answers.map((a) => a.text),
        // Each with the turn (from 0) whose answer it belongs to.
        citations: answers.flatMap((a, turn) => a.citations.map((c) => ({ turn, ...c }))),
        toolCalls: answers.flatMap((a, turn) => a.toolCalls.map((c) => ({ turn, ...c }))),
        handoff: answers.find((a) => a.handoff !== undefined)?.handoff ?? null,
        usage: {
          calls: usage.length,
          input: usage.reduce((n, u) => n + u.inputTokens, 0),
          output: usage.reduce((n, u) => n + u.outputTokens, 0),
          cacheRead: usage.reduce((n, u) => n + u.cacheReadTokens, 0),
          cacheWrite: usage.reduce((n, u) => n + u.cacheCreationTokens, 0),
        },
        costUsd: costs.every((c) => c !== undefined) ? costs.reduce((n, c) => n + c, 0) : null,
      };
    } finally {
      await knowledge?.close();
    }
  }
}

/**
 * Every try is paid for: each call is a row of the cost ledger (src/state/claude-calls.ts) of no
 * reply, reserved within the number's daily budget before it is made and settled after, so GET
 * /admin/costs and the budget count the playground as they count customers' answers.
 */
function playgroundLedger(deps: PlaygroundDeps, settings: PlaygroundSettings, phoneNumberId: string): CallLedger {
  const budgetUsd = settings.numbers.get(phoneNumberId)?.dailyBudget?.usd;
  const { claude, db, clock } = deps;
  let step = 0;
  return {
    around: (ask, call) =>
      countedClaudeCall(
        db,
        {
          id: randomUUID(),
          phoneNumberId,
          replyId: null,
          step: step++,
          model: claude.model,
          reservedUsd: greatestCostUsd(claude.model, claude.boundOf(ask), settings.modelPrices),
          budgetUsd,
        },
        settings.modelPrices,
        () => clock.now(),
        call,
      ),
  };
}

/** The playground's turns are words: no media to fetch. */
const NO_MEDIA = { downloadMedia: () => Promise.reject(new Error("the playground's turns are words only")) };
