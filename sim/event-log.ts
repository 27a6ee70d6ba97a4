/** The page's "what happened": webhook deliveries and their answers, sends and Meta's answers, faults. */

export type DemoEventKind = "webhook" | "send" | "status" | "read" | "media" | "claude" | "transcriber" | "fault" | "graph" | "business";

export interface DemoEvent {
  seq: number;
  at: string;
  kind: DemoEventKind;
  text: string;
  /** False when something failed or was refused (shown in red). */
  ok: boolean;
  /** The chat it belongs to, when one. */
  chat?: string | undefined;
}

const KEEP = 400;

export class EventLog {
  private readonly events: DemoEvent[] = [];
  private seq = 0;

  add(event: Omit<DemoEvent, "seq" | "at">): void {
    this.events.push({ ...event, seq: ++this.seq, at: new Date().toISOString() });
    if (this.events.length > KEEP) this.events.splice(0, this.events.length - KEEP);
  }

  /** Events after `seq`, oldest first. */
  since(seq: number): DemoEvent[] {
    return this.events.filter((e) => e.seq > seq);
  }

  get last(): number {
    return this.seq;
  }
}
