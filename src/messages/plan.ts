import type { Control } from "./controls.ts";

/**
 * What the bot does next about a conversation's unanswered messages, decided in their order
 * and against the conversation's state as it stands at that point (law 8): "STOP" then "hi"
 * never yields an answer after the confirmation, and "price?" then a voice note are answered
 * in that order. One call plans one answer: the leading run of messages of one kind (Claude's
 * or a configured answer; a burst of either gets one answer), and the deliberate skips before
 * and inside it. What follows waits for the next answer, so answers leave in order.
 */

export interface PendingMessage {
  id: string;
  wamid: string;
  /** What Claude would be shown; null when there is nothing to read. */
  text: string | null;
  /** A configured answer instead of Claude's (a voice note, an unsupported type). */
  cannedText: string | null;
  control: Control | null;
}

export interface ConversationState {
  optedOut: boolean;
  paused: boolean;
}

export interface PlanSettings {
  optOutReply: string;
  optInReply: string;
  handoffReply: string;
}

export interface Plan {
  /** Messages deliberately not answered, with the reason for the record (law 6). */
  skips: { id: string; reason: string }[];
  /** The answer to write now, and the messages it answers. */
  answer: { kind: "ai"; messageIds: string[] } | { kind: "canned"; messageIds: string[]; text: string } | undefined;
  /**
   * What the controls among the planned messages change, applied with the plan; and
   * `waitingWamid`, the first message the customer wrote to a bot already paused for a person
   * (nobody may be looking: the staff queue should show it).
   */
  effects: { optedOut?: boolean; handoffWamid?: string; waitingWamid?: string };
}

export function planNextAnswer(messages: readonly PendingMessage[], initial: ConversationState, settings: PlanSettings): Plan {
  const state = { ...initial };
  const plan: Plan = { skips: [], answer: undefined, effects: {} };
  const ai: string[] = [];
  const canned: { ids: string[]; texts: string[] } = { ids: [], texts: [] };
  const started = () => ai.length > 0 || canned.ids.length > 0;
  const skip = (m: PendingMessage, reason: string) => plan.skips.push({ id: m.id, reason });
  const waiting = (m: PendingMessage, reason: string) => {
    skip(m, reason);
    if (initial.paused) plan.effects.waitingWamid ??= m.wamid;
  };

  /** A control changes what comes after it: it is answered alone, so what follows sees the new state. */
  const control = (m: PendingMessage, text: string, reason: string): "stop" | "continue" => {
    if (text) {
      canned.ids.push(m.id);
      canned.texts.push(text);
      return "stop";
    }
    skip(m, reason);
    return "continue";
  };

  for (const m of messages) {
    if (m.control === "opt_out") {
      if (state.optedOut) {
        skip(m, "opted out (repeated)");
        continue;
      }
      if (started()) break;
      state.optedOut = plan.effects.optedOut = true;
      if (control(m, settings.optOutReply, "opted out") === "stop") break;
      continue;
    }
    if (m.control === "opt_in" && state.optedOut) {
      if (started()) break;
      state.optedOut = plan.effects.optedOut = false;
      if (control(m, settings.optInReply, "opted back in") === "stop") break;
      continue;
    }
    if (m.control === "handoff") {
      if (state.optedOut) {
        skip(m, "customer opted out");
        continue;
      }
      if (state.paused) {
        waiting(m, "bot paused for a person (repeated request)");
        continue;
      }
      if (started()) break;
      state.paused = true;
      plan.effects.handoffWamid = m.wamid;
      if (control(m, settings.handoffReply, "asked for a person") === "stop") break;
      continue;
    }
    if (state.optedOut) skip(m, "customer opted out");
    else if (state.paused) waiting(m, "bot paused for a person");
    else if (m.cannedText !== null) {
      if (ai.length > 0) break;
      canned.ids.push(m.id);
      if (!canned.texts.includes(m.cannedText)) canned.texts.push(m.cannedText);
    } else if (m.text) {
      if (canned.ids.length > 0) break;
      ai.push(m.id);
    } else skip(m, "nothing to answer");
  }

  if (ai.length > 0) plan.answer = { kind: "ai", messageIds: ai };
  else if (canned.ids.length > 0) plan.answer = { kind: "canned", messageIds: canned.ids, text: canned.texts.join("\n\n") };
  return plan;
}
