import { readFileSync } from "node:fs";
import type { FastifyInstance } from "fastify";

/**
 * The staff page: one static HTML file with a few small scripts over the JSON API, so the page, the
 * CLI and automation can never disagree, and nothing needs a front-end build. It holds no data:
 * it is served to anyone, and everything it shows comes through the authenticated API.
 */

const read = (name: string) => readFileSync(new URL(`./page/${name}`, import.meta.url), "utf8");
// ES modules, loaded by the browser as they are (app.js imports the others).
const SCRIPTS = ["app.js", "api.js", "dom.js", "queue.js", "detail.js", "templates.js", "presence.js", "costs.js", "live.js"];
const ASSETS: Record<string, { type: string; body: string }> = {
  ...Object.fromEntries(SCRIPTS.map((name) => [name, { type: "text/javascript; charset=utf-8", body: read(name) }])),
  "style.css": { type: "text/css; charset=utf-8", body: read("style.css") },
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
