/**
 * A tool's URL with `{placeholders}` that Claude's input fills: `https://shop.example/orders/{orderId}`.
 * The template fixes the scheme, host, port and the path's shape; input only ever fills a
 * place inside a path segment or the query, encoded, so no input can reach another host or
 * endpoint (`../admin`, `?all=true`, `@evil.example`).
 */

const PLACEHOLDER = /\{([^{}]*)\}/g;

/** The names a template's placeholders use, in order of first use. */
export function placeholdersOf(template: string): string[] {
  return [...new Set([...template.matchAll(PLACEHOLDER)].map((m) => m[1] ?? ""))];
}

/**
 * What is wrong with a template, for start-up to report: each string reads after the field's
 * name ("request.url ..."). Empty when it is a usable http(s) URL.
 */
export function templateProblems(template: string): string[] {
  const problems: string[] = [];
  const names = placeholdersOf(template);
  if (names.some((name) => name.trim() === "")) problems.push("has an empty placeholder {}");
  if (/[{}]/.test(template.replace(PLACEHOLDER, ""))) problems.push('has an unmatched "{" or "}"');
  let url: URL;
  try {
    url = new URL(template.replace(PLACEHOLDER, "x"));
  } catch {
    return [...problems, "must be an absolute http:// or https:// URL"];
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") return [...problems, `must be an http:// or https:// URL, not ${url.protocol}//`];
  if (url.username || url.password) problems.push("must not carry credentials: put them in a header, from an environment variable");
  if (/[{}]/.test(authorityOf(template))) problems.push("must not have a placeholder in its host or port: input may only fill the path or the query");
  if (pathSegments(template).some(isDotSegment)) problems.push('must not have a "." or ".." path segment');
  return problems;
}

export type Filled = { readonly url: string } | { readonly problem: string };

/**
 * The template filled from `input`, each value URL-encoded. A problem (for Claude to read)
 * when a value is missing or not a string, number or boolean, or when it would make an empty,
 * "." or ".." path segment, which URL parsing would fold into another endpoint.
 */
export function fillTemplate(template: string, input: Readonly<Record<string, unknown>>): Filled {
  const queryAt = queryStart(template);
  let problem: string | undefined;
  const filled = template.replace(PLACEHOLDER, (_match, name: string, offset: number) => {
    const value = Object.hasOwn(input, name) ? input[name] : undefined;
    if (typeof value !== "string" && typeof value !== "number" && typeof value !== "boolean") {
      problem ??= `"${name}" must be given as a string or a number: it goes into the URL`;
      return "";
    }
    const text = String(value);
    if (offset < queryAt && text === "") problem ??= `"${name}" must not be empty: it is part of the URL's path`;
    return encodeURIComponent(text);
  });
  if (problem) return { problem };
  if (pathSegments(filled).some(isDotSegment)) return { problem: 'the input would make a "." or ".." in the URL\'s path, which is not allowed' };
  return { url: filled };
}

/** Where the authority ends: `scheme://` then up to the first "/", "?" or "#". */
function authorityEnd(template: string): number {
  const start = template.indexOf("://") + 3;
  const rest = template.slice(start).search(/[/?#]/);
  return rest < 0 ? template.length : start + rest;
}

function authorityOf(template: string): string {
  return template.slice(template.indexOf("://") + 3, authorityEnd(template));
}

function queryStart(template: string): number {
  const at = template.slice(authorityEnd(template)).search(/[?#]/);
  return at < 0 ? template.length : authorityEnd(template) + at;
}

function pathSegments(url: string): string[] {
  return url.slice(authorityEnd(url), queryStart(url)).split("/").slice(1);
}

/** WHATWG URL parsing folds these (and their %2e spellings) away: `/orders/%2e%2e` is `/`. */
function isDotSegment(segment: string): boolean {
  return /^(?:\.|%2e){1,2}$/i.test(segment);
}
