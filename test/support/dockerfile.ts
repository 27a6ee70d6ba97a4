/**
 * Reads a Dockerfile and a .dockerignore the way Docker does, for the instructions and
 * patterns our own use (test/image-steps.test.ts replays them without Docker). Anything
 * else is refused by name, so a new instruction gets taught here rather than skipped.
 */

export interface Copy {
  /** The stage copied from; undefined for the build context. */
  from?: string;
  sources: string[];
  destination: string;
}

export interface Stage {
  name: string;
  image: string;
  workdir: string;
  /** In order, copies and runs interleaved as written. */
  steps: ({ kind: "copy"; copy: Copy } | { kind: "run"; command: string })[];
  user?: string;
  healthcheck?: string[];
  entrypoint?: string[];
  cmd?: string[];
}

const KNOWN = new Set(["ARG", "FROM", "WORKDIR", "COPY", "RUN", "USER", "EXPOSE", "HEALTHCHECK", "ENTRYPOINT", "CMD"]);

export function parseDockerfile(text: string): Stage[] {
  const args = new Map<string, string>();
  const stages: Stage[] = [];
  const substitute = (s: string) => s.replace(/\$\{(\w+)\}|\$(\w+)/g, (_, a?: string, b?: string) => args.get((a ?? b)!) ?? "");
  for (const line of logicalLines(text)) {
    const [, word = "", rest = ""] = /^(\S+)\s*(.*)$/s.exec(line) ?? [];
    const instruction = word.toUpperCase();
    if (!KNOWN.has(instruction)) throw new Error(`Dockerfile: ${instruction} is not an instruction test/support/dockerfile.ts knows`);
    if (instruction === "ARG") {
      const [name = "", value = ""] = rest.split("=", 2);
      args.set(name.trim(), value.trim());
      continue;
    }
    if (instruction === "FROM") {
      const [image = "", as, name] = rest.split(/\s+/);
      if (as?.toUpperCase() !== "AS" || !name) throw new Error(`Dockerfile: name every stage (FROM ${rest})`);
      stages.push({ name, image: substitute(image), workdir: "/", steps: [] });
      continue;
    }
    const stage = stages.at(-1);
    if (!stage) throw new Error(`Dockerfile: ${instruction} before FROM`);
    const { flags, body } = splitFlags(rest);
    switch (instruction) {
      case "WORKDIR":
        stage.workdir = body;
        break;
      case "COPY": {
        const unknown = [...flags.keys()].filter((f) => f !== "from");
        if (unknown.length) throw new Error(`Dockerfile: COPY --${unknown.join(", --")} is not replayed`);
        const words = body.split(/\s+/);
        const copy: Copy = { from: flags.get("from"), sources: words.slice(0, -1), destination: words.at(-1)! };
        stage.steps.push({ kind: "copy", copy });
        break;
      }
      case "RUN":
        // --mount=type=cache only keeps npm's cache between builds; the replay has its own.
        if ([...flags.keys()].some((f) => f !== "mount")) throw new Error(`Dockerfile: RUN ${rest}: only --mount is replayed`);
        if (body.startsWith("[")) throw new Error("Dockerfile: RUN in exec form is not replayed");
        stage.steps.push({ kind: "run", command: body });
        break;
      case "USER":
        stage.user = body;
        break;
      case "EXPOSE":
        break;
      case "HEALTHCHECK": {
        const cmd = /^CMD\s+(.*)$/s.exec(body);
        if (!cmd) throw new Error("Dockerfile: HEALTHCHECK wants CMD");
        stage.healthcheck = execForm("HEALTHCHECK", cmd[1]!);
        break;
      }
      case "ENTRYPOINT":
        stage.entrypoint = execForm(instruction, rest);
        break;
      case "CMD":
        stage.cmd = execForm(instruction, rest);
        break;
    }
  }
  return stages;
}

/** Comments and blank lines dropped, backslash continuations joined. */
function logicalLines(text: string): string[] {
  const lines: string[] = [];
  let current = "";
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (current === "" && (line === "" || line.startsWith("#"))) continue;
    if (line.endsWith("\\")) {
      current += `${line.slice(0, -1)} `;
      continue;
    }
    lines.push(current + line);
    current = "";
  }
  if (current) lines.push(current);
  return lines;
}

function splitFlags(rest: string): { flags: Map<string, string>; body: string } {
  const flags = new Map<string, string>();
  let body = rest;
  for (let m = /^--([\w-]+)(?:=(\S*))?\s+/.exec(body); m; m = /^--([\w-]+)(?:=(\S*))?\s+/.exec(body)) {
    flags.set(m[1]!, m[2] ?? "");
    body = body.slice(m[0].length);
  }
  return { flags, body: body.trim() };
}

/** Docker runs a shell-form command under /bin/sh -c; ours are exec form, so say so if not. */
function execForm(instruction: string, text: string): string[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new Error(`Dockerfile: ${instruction} in exec form (a JSON array), please: ${text}`);
  }
  if (!Array.isArray(parsed) || !parsed.every((p) => typeof p === "string")) throw new Error(`Dockerfile: ${instruction} is not an array of strings`);
  return parsed;
}

/**
 * .dockerignore: each pattern is matched against a path relative to the context and against
 * each of its parent directories; the last pattern that matches decides, `!` re-including.
 */
export function dockerignore(text: string): (path: string) => boolean {
  const rules = text
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith("#"))
    .map((l) => {
      const include = l.startsWith("!");
      const pattern = (include ? l.slice(1) : l).replace(/^\/+|\/+$/g, "");
      if (/[[\]\\]/.test(pattern)) throw new Error(`.dockerignore: ${l}: character classes and escapes are not replayed`);
      return { include, regex: globToRegex(pattern) };
    });
  return (path) => {
    const parts = path.split("/");
    let ignored = false;
    for (const rule of rules) {
      for (let n = 1; n <= parts.length; n++) {
        if (rule.regex.test(parts.slice(0, n).join("/"))) {
          ignored = !rule.include;
          break;
        }
      }
    }
    return ignored;
  };
}

function globToRegex(pattern: string): RegExp {
  let source = "";
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i]!;
    if (c === "*" && pattern[i + 1] === "*") {
      i++;
      if (pattern[i + 1] === "/") {
        source += "(?:.*/)?";
        i++;
      } else source += ".*";
    } else if (c === "*") source += "[^/]*";
    else if (c === "?") source += "[^/]";
    else source += c.replace(/[.+^${}()|]/g, "\\$&");
  }
  return new RegExp(`^${source}$`);
}
