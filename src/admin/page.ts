import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import type { FastifyInstance } from "fastify";

/**
 * The staff page: one static HTML file with a few small scripts over the JSON API, so the page, the
 * CLI and automation can never disagree, and nothing needs a front-end build. It holds no data:
 * it is served to anyone, and everything it shows comes through the authenticated API.
 */

const read = (name: string) => readFileSync(new URL(`./page/${name}`, import.meta.url), "utf8");
const resolve = createRequire(import.meta.url).resolve;
// ES modules, loaded by the browser as they are (app.js imports the others).
const SCRIPTS = [
  "app.js",
  "api.js",
  "dom.js",
  "chat.js",
  "queue.js",
  "detail.js",
  "templates.js",
  "presence.js",
  "costs.js",
  "conversations.js",
  "insights.js",
  "charts.js",
  "try.js",
  "customers.js",
  "live.js",
];
const JS = "text/javascript; charset=utf-8";
const CSS = "text/css; charset=utf-8";
const ASSETS: Record<string, { type: string; body: string }> = {
  ...Object.fromEntries(SCRIPTS.map((name) => [name, { type: JS, body: read(name) }])),
  "style.css": { type: CSS, body: read("style.css") },
  // The Insights view's charts: uPlot (MIT), a maintained chart library, served as its package
  // ships it, so that its version is package-lock.json's and nothing is copied into src.
  "uPlot.esm.js": { type: JS, body: readFileSync(resolve("uplot/dist/uPlot.esm.js"), "utf8") },
  "uPlot.min.css": { type: CSS, body: readFileSync(resolve("uplot/dist/uPlot.min.css"), "utf8") },
};
const INDEX = read("index.html");

export const PUBLIC_ROUTES = new Set(["GET /admin", "GET /admin/assets/:file"]);

export function registerStaffPage(app: FastifyInstance): void {
  app.get("/admin", async (_request, reply) => reply.type("text/html; charset=utf-8").header("cache-control", "no-store").send(INDEX));
  app.get<{ Params: { file: string } }>("/admin/assets/:file", async (request, reply) => {
    const asset = Object.hasOwn(ASSETS, request.params.file) ? ASSETS[request.params.file] : undefined;
    if (!asset) return reply.code(404).send({ error: "not found" });
    return reply.type(asset.type).header("cache-control", "no-cache").send(asset.body);
  });
}
