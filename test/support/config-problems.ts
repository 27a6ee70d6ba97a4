import { ConfigError } from "../../src/config/config.ts";
import { loadSettings } from "../../src/settings.ts";

/** What start-up would say is wrong with `env`: every problem, or none. */
export function problemsOf(env: Record<string, string | undefined>): string[] {
  try {
    loadSettings(env);
  } catch (error) {
    if (error instanceof ConfigError) return error.problems;
    throw error;
  }
  return [];
}
