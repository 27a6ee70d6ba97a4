import { ConfigError, loadConfig } from "../../src/config/config.ts";

/** What start-up would say is wrong with `env`: every problem, or none. */
export function problemsOf(env: Record<string, string | undefined>): string[] {
  try {
    loadConfig(env);
  } catch (error) {
    if (error instanceof ConfigError) return error.problems;
    throw error;
  }
  return [];
}
