import type { Queue } from "bullmq";
import type { Queues } from "../../src/queue/queues.ts";

/**
 * Resolves once no job of the system is waiting, running or delayed: the work a run started
 * has finished, follow-up jobs included (a reply job schedules the next one; a debounced one
 * waits in the delayed set). The reconciler's queue always holds its next scheduled sweep,
 * delayed, so only its running and waiting jobs count.
 */
export async function untilQuiet(queues: Queues, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const busy = await Promise.all(
      (Object.entries(queues) as [string, Queue][]).map(async ([name, queue]) => {
        const counts = await queue.getJobCounts("active", "wait", "prioritized", "waiting-children", "delayed");
        if (name === "reconcile") counts.delayed = 0;
        return Object.values(counts).reduce((a, b) => a + b, 0);
      }),
    );
    if (busy.every((n) => n === 0)) return;
    if (Date.now() > deadline) throw new Error(`the system did not go quiet within ${timeoutMs} ms (${busy.join(", ")} jobs busy by queue)`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
