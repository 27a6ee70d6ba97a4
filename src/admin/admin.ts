import helmet from "@fastify/helmet";
import type { FastifyInstance, FastifyPluginAsync } from "fastify";
import type { Playground } from "../eval/playground.ts";
import type { Queues } from "../queue/queues.ts";
import { StoredAnswers } from "../queue/stored-answers.ts";
import type { TemplateCatalog } from "../whatsapp/templates.ts";
import { registerStaffAuth, type StaffAuthDeps } from "./auth.ts";
import { registerIdempotency } from "./idempotency.ts";
import { describeStaffApi } from "./openapi.ts";
import { registerStaffPage } from "./page.ts";
import { registerContactRoutes } from "./routes/contacts.ts";
import { registerConversationRoutes } from "./routes/conversations.ts";
import { type CostRoutesDeps, registerCostRoutes } from "./routes/costs.ts";
import { registerDeadLetterRoutes } from "./routes/dlq.ts";
import { registerHandoffRoutes } from "./routes/handoff.ts";
import { type InsightRoutesDeps, registerInsightRoutes } from "./routes/insights.ts";
import { ChangeFeed, type LiveQueueSettings, registerLiveQueue } from "./routes/live.ts";
import { registerPlaygroundRoutes } from "./routes/playground.ts";
import { registerPresenceRoutes } from "./routes/presence.ts";
import { registerQueueBoard } from "./routes/queues.ts";
import { registerTemplateRoutes } from "./routes/templates.ts";
import { serializeAsJson, validateWithZod } from "./schema.ts";

export interface AdminDeps extends StaffAuthDeps {
  queues: Queues;
  /** The cost ledger's prices (GET /admin/costs). */
  costs: CostRoutesDeps["costs"];
  /** Each number's knowledgeDir and the caps of a reading (GET /admin/insights lists the files). */
  knowledge: InsightRoutesDeps["knowledge"];
  /** The business account's approved templates (WHATSAPP_BUSINESS_ACCOUNT_ID); undefined: none configured. */
  templates: TemplateCatalog | undefined;
  /** The live queue's clocks and bounds (GET /admin/events); its own defaults when absent. */
  liveQueue?: LiveQueueSettings | undefined;
  /** KNOWLEDGE_LANGUAGE: the text-search configuration conversations are searched with. */
  searchLanguage: string;
  /** The key of an erased customer's identity hash in the audit (WHATSAPP_APP_SECRET). */
  identityKey: string;
  /** What the bot would answer, tried by operators (POST /admin/playground). */
  playground: Playground;
}

/**
 * The staff API: automation with the bearer token, people signed in with a session (auth.ts).
 * What every route shares is set here, in order; each resource's routes are in routes/.
 */
export function adminRoutes(deps: AdminDeps): FastifyPluginAsync {
  return async (scope: FastifyInstance) => {
    scope.setValidatorCompiler(validateWithZod);
    scope.setSerializerCompiler(serializeAsJson);
    // First, so that it sees every route registered after it.
    describeStaffApi(scope);
    acceptEmptyJson(scope);
    // Security headers on every /admin answer (CSP, no framing, no sniffing, HSTS).
    await scope.register(helmet);
    // Made before the routes: a session signed out here ends its live-queue streams at once.
    const liveQueue = new ChangeFeed({ ...deps.liveQueue, db: deps.db, clock: deps.clock }, scope.log);
    registerStaffAuth(scope, { ...deps, signedOut: (sessionId) => liveQueue.endSession(sessionId) });
    registerStaffPage(scope);
    // After authentication, so an unauthenticated request can neither claim nor replay a key;
    // each person's keys are their own.
    registerIdempotency(scope, { redis: deps.redis, keyPrefix: deps.keyPrefix, scope: (request) => request.actor });

    const sends = { db: deps.db, queues: deps.queues, clock: deps.clock };
    registerDeadLetterRoutes(scope, sends);
    registerHandoffRoutes(scope, sends);
    registerPresenceRoutes(scope, { db: deps.db, clock: deps.clock });
    registerTemplateRoutes(scope, { ...sends, templates: deps.templates, metaRates: deps.costs.metaRates });
    registerCostRoutes(scope, { db: deps.db, costs: deps.costs, clock: deps.clock });
    registerInsightRoutes(scope, { db: deps.db, costs: deps.costs, knowledge: deps.knowledge, clock: deps.clock });
    registerConversationRoutes(scope, { db: deps.db, clock: deps.clock, searchLanguage: deps.searchLanguage, modelPrices: deps.costs.modelPrices });
    registerPlaygroundRoutes(scope, deps.playground);
    registerContactRoutes(scope, {
      db: deps.db,
      queues: deps.queues,
      clock: deps.clock,
      modelPrices: deps.costs.modelPrices,
      identityKey: deps.identityKey,
      storedAnswers: new StoredAnswers(deps.redis, deps.keyPrefix),
    });
    registerLiveQueue(scope, liveQueue);
    await registerQueueBoard(scope, deps.queues);
  };
}

/**
 * Staff tools often send Content-Type: application/json with no body on a bare "discard":
 * that is read as {} rather than refused. Malformed JSON is still a 400.
 */
function acceptEmptyJson(scope: FastifyInstance): void {
  scope.removeContentTypeParser("application/json");
  scope.addContentTypeParser("application/json", { parseAs: "string" }, (_request, body, done) => {
    if (typeof body !== "string" || body.trim() === "") return done(null, {});
    try {
      done(null, JSON.parse(body));
    } catch {
      done(Object.assign(new Error("malformed JSON"), { statusCode: 400 }), undefined);
    }
  });
}
