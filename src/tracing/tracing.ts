import {
  type Attributes,
  type Context,
  context,
  INVALID_SPAN_CONTEXT,
  ProxyTracerProvider,
  ROOT_CONTEXT,
  type Span,
  type SpanOptions,
  SpanStatusCode,
  type TextMapPropagator,
  type Tracer,
  type TracerProvider,
  trace,
} from "@opentelemetry/api";
import type { Telemetry } from "bullmq";

/**
 * Traces, when OTEL_EXPORTER_OTLP_ENDPOINT turns them on (src/tracing/sdk.ts, started by
 * main.ts alone). One trace per customer message: the webhook delivery, the inbound job, the
 * reply job it schedules, the Claude call and the Graph sends. The trace crosses Redis in the
 * job itself: BullMQ's own telemetry hook keeps a W3C `traceparent` in the job's options
 * (`opts.telemetry.metadata`) and opens each run's span as its child.
 */
export interface Tracing {
  tracer: Tracer;
  /** For the libraries that trace themselves (the Anthropic SDK). */
  provider: TracerProvider;
  /** BullMQ's telemetry option, for the queues and the workers. */
  queues: Telemetry<Context>;
}

/** A tracer that records nothing, whatever is registered globally: what the clients use when tracing is off. */
export const NO_TRACER: Tracer = new ProxyTracerProvider().getTracer("off");

/**
 * Runs `fn` in a span of its own, the active one meanwhile (so what it calls nests under it);
 * a failure is recorded on the span and thrown on.
 */
export function inSpan<T>(tracer: Tracer, name: string, options: SpanOptions, fn: (span: Span) => Promise<T>): Promise<T> {
  return tracer.startActiveSpan(name, options, async (span) => {
    try {
      return await fn(span);
    } catch (error) {
      failed(span, error);
      throw error;
    } finally {
      span.end();
    }
  });
}

function failed(span: Span, error: unknown): void {
  const code = (error as { code?: unknown }).code;
  if (typeof code === "string" || typeof code === "number") span.setAttribute("error.type", String(code));
  span.recordException(error instanceof Error ? error : String(error));
  span.setStatus({ code: SpanStatusCode.ERROR, message: error instanceof Error ? error.message : String(error) });
}

/**
 * The operations of a job's path that are traced: its add (producer) and each run (consumer).
 * BullMQ also traces its housekeeping (every fetch, the stalled-job check every JOB_LOCK_MS,
 * closes, pauses), which would bury the messages' traces under traces of nothing.
 */
const JOB_PATH = new Set(["add", "addBulk", "process"]);

const NOT_RECORDED = trace.wrapSpanContext(INVALID_SPAN_CONTEXT);

/**
 * BullMQ's Telemetry on our tracer (the `bullmq-otel` package does the same on the global
 * one, without `root()`, so the stalled-job loop would stay inside whatever span started the
 * worker). BullMQ names spans "<operation> <queue>"; its span kinds are OpenTelemetry's.
 */
export function bullmqTelemetry(tracer: Tracer, propagator: TextMapPropagator): Telemetry<Context> {
  return {
    tracer: {
      startSpan(name, options, parent) {
        const span = JOB_PATH.has(name.split(" ", 1)[0]!) ? tracer.startSpan(name, { kind: options?.kind as number }, parent) : NOT_RECORDED;
        return {
          setSpanOnContext: (ctx: Context) => trace.setSpan(ctx, span),
          setAttribute: (key, value) => span.setAttribute(key, value),
          setAttributes: (attributes) => span.setAttributes(attributes as Attributes),
          addEvent: (event, attributes) => span.addEvent(event, attributes as Attributes),
          recordException: (exception) => span.recordException(exception),
          end: () => span.end(),
        };
      },
    },
    contextManager: {
      with: (ctx, fn) => context.with(ctx, fn),
      active: () => context.active(),
      root: () => ROOT_CONTEXT,
      getMetadata(ctx) {
        const carrier: Record<string, string> = {};
        propagator.inject(ctx, carrier, { set: (c, key, value) => (c[key] = value) });
        return JSON.stringify(carrier);
      },
      fromMetadata(active, metadata) {
        let carrier: Record<string, string> = {};
        try {
          carrier = JSON.parse(metadata) as Record<string, string>;
        } catch {
          // Not ours (a job added by another tool): the run starts a trace of its own.
        }
        return propagator.extract(active, carrier, { get: (c, key) => c[key], keys: (c) => Object.keys(c) });
      },
    },
  };
}
