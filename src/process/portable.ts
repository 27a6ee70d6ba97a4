import type { Settings } from "../settings.ts";
import { BusinessTool, type BusinessToolSpec } from "../tools/business-tool.ts";

/**
 * The Settings as they cross to the worker child of `npm start` (worker-child.ts), which
 * receives them by structured cloning. A clone keeps Maps and plain data, but neither a class
 * nor its private fields: a BusinessTool would arrive without its header secrets and without
 * its methods. So the tools travel as their specs, secrets included, and are made again on the
 * other side, schemas compiled as the parent did.
 */

export type PortableSettings = Omit<Settings, "businessTools"> & { readonly businessTools: ReadonlyMap<string, readonly BusinessToolSpec[]> };

export function portableSettings(settings: Settings): PortableSettings {
  const businessTools = new Map([...settings.businessTools].map(([id, tools]) => [id, tools.map((tool) => tool.toSpec())] as const));
  return { ...settings, businessTools };
}

export function settingsFromPortable(portable: PortableSettings): Settings {
  const businessTools = new Map([...portable.businessTools].map(([id, specs]) => [id, Object.freeze(specs.map((spec) => new BusinessTool(spec)))] as const));
  return Object.freeze({ ...portable, businessTools });
}
