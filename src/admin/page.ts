import { readFileSync } from "node:fs";
import type { FastifyInstance } from "fastify";

/**
 * The staff page: one static HTML file with a small script over the JSON API, so the page, the
 * CLI and automation can never disagree, and nothing needs a front-end build. It holds no data:
 * it is served to anyone, and everything it shows comes through the authenticated API.
 */

const read = (name: string) => readFileSync(new URL(`./page/${name}`, import.meta.url), "utf8");
const ASSETS: Record<string, { type: string; body: string }> = {
  "app.js": { type: "text/javascript; charset=utf-8", body: read("app.js") },
  "style.css": { type: "text/css; charset=utf-8", body: read("style.css") },
};
const INDEX = read("index.html");

export const PUBLIC_ROUTES = new Set(["GET /admin", "GET /admin/assets/:file"]);

export function registerStaffPage(app: FastifyInstance): void {
  app.get("/admin", async (_request, reply) => reply.type("text/html; charset=utf-8").header("cache-control", "no-store").send(INDEX));
  app.get<{ Params: { file: string } }>("/admin/assets/:file", async (request, reply) => {
    const asset = ASSETS[request.params.file];
    if (!asset) return reply.code(404).send({ error: "not found" });
    return reply.type(asset.type).header("cache-control", "no-cache").send(asset.body);
  });
}
