import { loadModelPrices } from "./ai/prices-file.ts";
import { NO_OVERRIDES, type PriceOverrides } from "./ai/pricing.ts";
import { type Config, ConfigError, readConfig } from "./config/config.ts";
import type { MetaRates } from "./costs/meta-rates.ts";
import { loadMetaRates } from "./costs/rates-file.ts";
import { knowledgeFolderProblems } from "./knowledge/walk.ts";
import type { BusinessTool } from "./tools/business-tool.ts";
import { loadToolsFile } from "./tools/tools-file.ts";

/**
 * What a process runs with: the environment's plain Config (src/config/), and what the files it
 * names compile to, each by the module that owns its meaning: the business numbers' tools
 * (src/tools/) and knowledge folders (src/knowledge/), Claude's prices (src/ai/), Meta's rate
 * card (src/costs/). Every problem, of the environment and of each file, is reported at once,
 * each naming where it is.
 */
export interface Settings extends Config {
  /** Each business number's tools (its toolsFile), their secrets kept private (src/tools/business-tool.ts). */
  readonly businessTools: ReadonlyMap<string, readonly BusinessTool[]>;
  /**
   * The cost ledger's prices (issue 20): Claude models' from MODEL_PRICES_FILE over the
   * built-in table; Meta's rate card from META_RATES_FILE, without which billed messages are
   * counted, not priced.
   */
  readonly costs: { readonly modelPrices: PriceOverrides; readonly metaRates: MetaRates | undefined };
}

/** `env` also resolves the environment variables the tools files' headers name. */
export function loadSettings(env: Record<string, string | undefined>): Settings {
  const problems: string[] = [];
  const config = readConfig(env, problems);
  const modelPrices = config?.priceFiles.modelPrices ? loadModelPrices(config.priceFiles.modelPrices, problems) : NO_OVERRIDES;
  const metaRates = config?.priceFiles.metaRates ? loadMetaRates(config.priceFiles.metaRates, problems) : undefined;
  const businessTools = new Map<string, readonly BusinessTool[]>();
  for (const [id, settings] of config?.numbers ?? []) {
    if (!settings.toolsFile) continue;
    const tools = loadToolsFile(settings.toolsFile.path, `PHONE_NUMBERS_FILE ${id}.toolsFile (${settings.toolsFile.given})`, env, problems);
    if (tools) businessTools.set(id, Object.freeze(tools));
  }
  if (config) knowledgeProblems(config, problems);
  if (!config || problems.length > 0) throw new ConfigError(problems);
  return Object.freeze({ ...config, businessTools, costs: { modelPrices, metaRates } });
}

/** Each number's knowledgeDir, walked once: a link leading outside it, or a folder past its caps, stops the start. */
function knowledgeProblems(config: Config, problems: string[]): void {
  const found = new Map<string, string[]>();
  for (const [id, { knowledgeDir }] of config.numbers) {
    if (!knowledgeDir) continue;
    let folder = found.get(knowledgeDir);
    if (!folder) {
      folder = knowledgeFolderProblems(knowledgeDir, config.knowledge.limits);
      found.set(knowledgeDir, folder);
    }
    for (const problem of folder) problems.push(`PHONE_NUMBERS_FILE ${id}.knowledgeDir: ${problem}`);
  }
}
