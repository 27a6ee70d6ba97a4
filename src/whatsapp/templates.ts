import { z } from "zod";
import type { Clock } from "../clock.ts";
import type { GraphClient } from "./graph-client.ts";

/**
 * The business account's approved templates, as staff pick them (WHATSAPP.md §7, §12): name,
 * language, category, the body's words and how many `{{n}}` parameters it takes. Read from
 * Meta and kept in memory for a few minutes: templates change in WhatsApp Manager, rarely.
 */

const componentSchema = z.object({ type: z.string(), text: z.string().optional(), format: z.string().optional() }).passthrough();
const templateSchema = z
  .object({
    name: z.string().min(1),
    language: z.string().min(1),
    category: z.string().default("UNKNOWN"),
    status: z.string().default("UNKNOWN"),
    components: z.array(componentSchema).default([]),
  })
  .passthrough();

export interface ApprovedTemplate {
  name: string;
  language: string;
  category: string;
  /** The body's words with their `{{1}}`-style placeholders. */
  body: string;
  /** How many parameters the body takes: its highest `{{n}}`. */
  parameterCount: number;
}

/** The highest `{{n}}` of a body: Meta numbers them from 1, without gaps. */
export function countParameters(body: string): number {
  let highest = 0;
  for (const match of body.matchAll(/\{\{\s*(\d+)\s*\}\}/g)) highest = Math.max(highest, Number(match[1]));
  return highest;
}

/** The body as the customer reads it, each `{{n}}` filled with the n-th parameter. */
export function fillTemplate(body: string, parameters: readonly string[]): string {
  return body.replace(/\{\{\s*(\d+)\s*\}\}/g, (whole, n: string) => parameters[Number(n) - 1] ?? whole);
}

/** Meta's templates, APPROVED ones only, as staff pick them; a template of an unknown shape is left out. */
export function approvedTemplates(raw: readonly unknown[]): ApprovedTemplate[] {
  const approved: ApprovedTemplate[] = [];
  for (const item of raw) {
    const parsed = templateSchema.safeParse(item);
    if (!parsed.success || parsed.data.status !== "APPROVED") continue;
    const body = parsed.data.components.find((c) => c.type.toUpperCase() === "BODY")?.text ?? "";
    approved.push({ name: parsed.data.name, language: parsed.data.language, category: parsed.data.category, body, parameterCount: countParameters(body) });
  }
  return approved.sort((a, b) => a.name.localeCompare(b.name) || a.language.localeCompare(b.language));
}

export const TEMPLATE_CACHE_MS = 5 * 60 * 1000;

/** The approved templates of one business account, cached for TEMPLATE_CACHE_MS; `refresh` reads Meta again. */
export class TemplateCatalog {
  private cached: { at: number; templates: ApprovedTemplate[] } | undefined;
  private reading: Promise<ApprovedTemplate[]> | undefined;

  constructor(
    private readonly graph: Pick<GraphClient, "listTemplates">,
    private readonly businessAccountId: string,
    private readonly clock: Clock,
  ) {}

  async list(options: { refresh?: boolean } = {}): Promise<{ templates: ApprovedTemplate[]; fetchedAt: Date }> {
    if (!options.refresh && this.cached && this.clock.now().getTime() - this.cached.at < TEMPLATE_CACHE_MS) {
      return { templates: this.cached.templates, fetchedAt: new Date(this.cached.at) };
    }
    // One read of Meta at a time, however many pages open at once.
    this.reading ??= this.graph
      .listTemplates(this.businessAccountId)
      .then(approvedTemplates)
      .finally(() => {
        this.reading = undefined;
      });
    const templates = await this.reading;
    this.cached = { at: this.clock.now().getTime(), templates };
    return { templates, fetchedAt: new Date(this.cached.at) };
  }

  /** The approved template of that name and language, or undefined. */
  async find(name: string, language: string): Promise<ApprovedTemplate | undefined> {
    const { templates } = await this.list();
    return templates.find((t) => t.name === name && t.language === language);
  }
}
