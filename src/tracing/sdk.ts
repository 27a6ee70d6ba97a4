import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { BatchSpanProcessor, NodeTracerProvider } from "@opentelemetry/sdk-trace-node";
import type { Config } from "../config/config.ts";
import { bullmqTelemetry, type Tracing } from "./tracing.ts";

export interface StartedTracing {
  tracing: Tracing;
  /** Exports the spans still buffered, then stops: the last thing a process does before it exits. */
  shutdown(): Promise<void>;
}

/**
 * The OpenTelemetry SDK, for main.ts alone to start (and only when OTEL_EXPORTER_OTLP_ENDPOINT
 * or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set): spans are batched and posted as OTLP/HTTP
 * JSON. Registered globally because the context (which span is active) must be one across
 * Fastify, BullMQ and our code: Node's AsyncLocalStorage, through the API's context manager.
 */
export function startTracing(settings: NonNullable<Config["tracing"]>, role: "web" | "worker"): StartedTracing {
  const propagator = new W3CTraceContextPropagator();
  const provider = new NodeTracerProvider({
    resource: resourceFromAttributes({ "service.name": settings.serviceName ?? `whatsapp-ai-reply-${role}` }),
    spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter({ url: settings.tracesUrl, headers: { ...settings.headers } }))],
  });
  provider.register({ propagator });
  const tracer = provider.getTracer("whatsapp-ai-reply");
  return {
    tracing: { tracer, provider, queues: bullmqTelemetry(tracer, propagator) },
    shutdown: () => provider.shutdown(),
  };
}
