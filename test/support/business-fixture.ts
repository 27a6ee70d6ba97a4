import { mkdir, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import type { ClaudeAnswer } from "./fake-anthropic.ts";
import { PHONE_NUMBER_ID } from "./webhook-bodies.ts";

/**
 * A business for the eval and playground tests: a knowledge folder with hours.md, a tools file
 * whose endpoints are a local server that records each request it gets and answers one order,
 * and the numbers file naming both for PHONE_NUMBER_ID.
 */

export const HOURS = "Closed on Sundays.";

/** Claude's answer citing hours.md's sentence, as the fake Messages API gives it. */
export const citedHours = (text = "We are closed on Sundays."): ClaudeAnswer => ({
  content: [
    {
      type: "text",
      text,
      citations: [
        { type: "char_location", cited_text: HOURS, document_index: 0, document_title: "hours.md", start_char_index: 0, end_char_index: HOURS.length },
      ],
    },
  ],
});

export interface Business {
  /** PHONE_NUMBERS_FILE for PHONE_NUMBER_ID: its knowledgeDir and toolsFile. */
  numbersFile: string;
  /** "METHOD /path" of every request the business got. */
  requests: string[];
  stop(): Promise<void>;
}

/** In `root`: the business's files, and its server listening; `tools` as name → [method, path, required input]. */
export async function startBusiness(root: string, tools: Record<string, [method: string, path: string, required: string[]]>): Promise<Business> {
  const requests: string[] = [];
  const server: Server = createServer((req, res) => {
    requests.push(`${req.method} ${req.url}`);
    res.writeHead(200, { "content-type": "application/json" }).end('{"orderId":"A1003","status":"delivered"}');
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  await mkdir(join(root, "knowledge"));
  await writeFile(join(root, "knowledge", "hours.md"), HOURS);
  const definitions = Object.entries(tools).map(([name, [method, path, required]]) => ({
    name,
    description: name,
    input_schema: { type: "object", properties: { orderId: { type: "string" }, day: { type: "string" } }, required },
    request: { method, url: `${url}${path}` },
    allowPrivateNetwork: true,
  }));
  await writeFile(join(root, "tools.json"), JSON.stringify({ tools: definitions }));
  const numbersFile = join(root, "numbers.json");
  await writeFile(numbersFile, JSON.stringify({ [PHONE_NUMBER_ID]: { knowledgeDir: "knowledge", toolsFile: "tools.json" } }));
  return { numbersFile, requests, stop: () => new Promise((resolve) => server.close(() => resolve())) };
}
