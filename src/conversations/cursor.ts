/**
 * Where a page ended, handed back opaque (base64url): a time and a row's id, the order's
 * tie-breaker. The conversations' list and a conversation's timeline page by one each.
 */
export interface Cursor {
  at: Date;
  id: string;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export function encodeCursor(cursor: Cursor): string {
  return Buffer.from(JSON.stringify([cursor.at.toISOString(), cursor.id])).toString("base64url");
}

/** The cursor a page gave, or undefined when the text is not one. */
export function decodeCursor(text: string): Cursor | undefined {
  try {
    const value: unknown = JSON.parse(Buffer.from(text, "base64url").toString("utf8"));
    if (!Array.isArray(value) || value.length !== 2) return undefined;
    const [at, id] = value as unknown[];
    if (typeof at !== "string" || typeof id !== "string" || !UUID.test(id)) return undefined;
    const when = new Date(at);
    return Number.isNaN(when.getTime()) ? undefined : { at: when, id };
  } catch {
    return undefined;
  }
}
