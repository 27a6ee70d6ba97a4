import { BusinessTool, type BusinessToolSpec } from "../tools/business-tool.ts";
import type { Config } from "./config.ts";
import type { NumberSettings } from "./numbers.ts";

/**
 * The Config as it crosses to the worker child of `npm start` (src/process/worker-child.ts),
 * which receives it by structured cloning. A clone keeps Maps and plain data, but neither a
 * class nor its private fields: a BusinessTool would arrive without its header secrets and
 * without its methods. So its tools travel as their specs, secrets included, and are made
 * again on the other side, schemas compiled as the parent did.
 */

export type PortableNumberSettings = Omit<NumberSettings, "tools"> & { readonly tools?: readonly BusinessToolSpec[] };
export type PortableConfig = Omit<Config, "numbers"> & { readonly numbers: ReadonlyMap<string, PortableNumberSettings> };

export function portableConfig(config: Config): PortableConfig {
  const numbers = new Map<string, PortableNumberSettings>();
  for (const [id, { tools, ...settings }] of config.numbers) numbers.set(id, tools ? { ...settings, tools: tools.map((tool) => tool.toSpec()) } : settings);
  return { ...config, numbers };
}

export function configFromPortable(portable: PortableConfig): Config {
  const numbers = new Map<string, NumberSettings>();
  for (const [id, { tools, ...settings }] of portable.numbers) {
    numbers.set(id, tools ? { ...settings, tools: Object.freeze(tools.map((spec) => new BusinessTool(spec))) } : settings);
  }
  return Object.freeze({ ...portable, numbers });
}
