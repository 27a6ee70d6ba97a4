import { describe, expect, it } from "vitest";
import { BusinessTool, type BusinessToolSpec } from "../src/tools/business-tool.ts";
import { HANDOFF_TOOL, toolDefinitions } from "../src/tools/definitions.ts";
import { idempotencyKeyFor } from "../src/tools/idempotency.ts";
import { fillTemplate } from "../src/tools/url-template.ts";

/** Issue 19: the business's own tools, as Claude sees them and as they are called. */

const SHOP = "106540352242922";

function spec(overrides: Partial<BusinessToolSpec> = {}, request: Partial<BusinessToolSpec["request"]> = {}): BusinessToolSpec {
  return {
    name: "lookup_order",
    description: "Looks up one of the customer's orders by its number.",
    inputSchema: { type: "object", properties: { orderId: { type: "string" } }, required: ["orderId"] },
    allowPrivateNetwork: false,
    ...overrides,
    request: {
      method: "GET",
      url: "https://orders.shop.example/v1/orders/{orderId}",
      headers: { Authorization: "Bearer secret-token" },
      timeoutMs: 2000,
      ...request,
    },
  };
}

describe("what Claude is given", () => {
  it("is each tool's name, description and input_schema, and nothing of its request", () => {
    const definitions = toolDefinitions([new BusinessTool(spec())]);
    expect(definitions).toEqual([
      {
        name: "lookup_order",
        description: "Looks up one of the customer's orders by its number.",
        input_schema: { type: "object", properties: { orderId: { type: "string" } }, required: ["orderId"] },
      },
    ]);
    expect(JSON.stringify(definitions)).not.toMatch(/secret-token|orders\.shop\.example|GET/);
  });

  it("handoff_to_human is built in: a reason in, for staff; Claude is told when to use it", () => {
    expect(HANDOFF_TOOL).toMatchObject({
      name: "handoff_to_human",
      input_schema: { type: "object", properties: { reason: { type: "string" } }, required: ["reason"] },
    });
    expect(HANDOFF_TOOL.description).toMatch(/person/);
    expect(HANDOFF_TOOL.description).toMatch(/knowledge and tools/);
    expect(HANDOFF_TOOL.description).toMatch(/guess/);
  });
});

describe("the Idempotency-Key", () => {
  it("is the same for the same number and tool_use.id, every time, and differs when either differs", () => {
    const key = idempotencyKeyFor(SHOP, "toolu_01A09q90qw90lq917835lq9");
    expect(key).toMatch(/^[0-9a-f]{64}$/);
    expect(idempotencyKeyFor(SHOP, "toolu_01A09q90qw90lq917835lq9")).toBe(key);
    expect(idempotencyKeyFor(SHOP, "toolu_01A09q90qw90lq917835lqX")).not.toBe(key);
    expect(idempotencyKeyFor("106540352249999", "toolu_01A09q90qw90lq917835lq9")).not.toBe(key);
    // The parts never run into each other.
    expect(idempotencyKeyFor("1", "23")).not.toBe(idempotencyKeyFor("12", "3"));
  });
});

describe("a URL template filled from the input", () => {
  const template = "https://orders.shop.example/v1/orders/{orderId}/lines?sku={sku}";

  it("encodes each value, so no input changes the host, the path's shape or the query", () => {
    expect(fillTemplate(template, { orderId: "A-17", sku: 42 })).toEqual({ url: "https://orders.shop.example/v1/orders/A-17/lines?sku=42" });
    expect(fillTemplate(template, { orderId: "../../admin?all=1#x", sku: "a&b=c" })).toEqual({
      url: "https://orders.shop.example/v1/orders/..%2F..%2Fadmin%3Fall%3D1%23x/lines?sku=a%26b%3Dc",
    });
    expect(fillTemplate(template, { orderId: "@evil.example:80\\x", sku: "" })).toEqual({
      url: "https://orders.shop.example/v1/orders/%40evil.example%3A80%5Cx/lines?sku=",
    });
  });

  it("refuses a value that would be a whole '.' or '..' segment, an empty path value, or a value that is not a string or number", () => {
    expect(fillTemplate(template, { orderId: "..", sku: "1" })).toEqual({ problem: expect.stringMatching(/"\." or "\.\."/) });
    expect(fillTemplate(template, { orderId: "%2e%2E", sku: "1" })).toEqual({ url: expect.stringContaining("/orders/%252e%252E/") });
    expect(fillTemplate("https://x.example/files/.{ext}", { ext: "." })).toEqual({ problem: expect.stringMatching(/"\." or "\.\."/) });
    expect(fillTemplate(template, { orderId: "", sku: "1" })).toEqual({ problem: '"orderId" must not be empty: it is part of the URL\'s path' });
    expect(fillTemplate(template, { orderId: { id: 1 }, sku: "1" })).toEqual({
      problem: '"orderId" must be given as a string or a number: it goes into the URL',
    });
    expect(fillTemplate(template, { sku: "1" })).toEqual({ problem: '"orderId" must be given as a string or a number: it goes into the URL' });
  });
});
