import type { Job } from "bullmq";
import type { JobData, JobName } from "../queue/catalog.ts";

/**
 * What runs one job of the catalog (src/queue/catalog.ts), made from the dependencies it uses
 * alone (each module's `…Processor`). A string it resolves to names the outcome for the jobs metric.
 */
export interface Processor<N extends JobName> {
  run(job: Job<JobData<N>>): Promise<unknown>;
  /** A job the catalog keeps for staff (`invalid: "dead_letter"`) whose data can never be read. */
  keepInvalid?(data: unknown, reason: string): Promise<void>;
}

/** One processor per job of the catalog; undefined: not run by this process (staff notifications with no channel set). */
export type Processors = { [N in JobName]: Processor<N> | undefined };
