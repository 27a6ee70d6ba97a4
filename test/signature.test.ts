import { createHmac } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { verifyMetaSignature } from "../src/webhook/signature.ts";

/**
 * Law 1 (DESIGN.md §3, WHATSAPP.md §2): X-Hub-Signature-256 is HMAC-SHA256 of the body
 * exactly as it arrived. The fixtures are Meta wire-format bodies, signed once with the
 * secret committed beside them; they are read as raw bytes and never re-serialised.
 */

const FIXTURES = new URL("../fixtures/", import.meta.url);

interface SignatureFile {
  appSecret: string;
  signatures: Record<string, string>;
}

const signatureFile = JSON.parse(readFileSync(new URL("signatures.json", FIXTURES), "utf8")) as SignatureFile;
const SECRET = signatureFile.appSecret;
const fixtureNames = readdirSync(FIXTURES)
  // Meta's bodies; an operator's sample file (*.example.json) is not one.
  .filter((name) => name.endsWith(".json") && name !== "signatures.json" && !name.endsWith(".example.json"))
  .sort();

const readRaw = (name: string): Buffer => readFileSync(new URL(name, FIXTURES));

function committedSignature(name: string): string {
  const signature = signatureFile.signatures[name];
  if (signature === undefined) throw new Error(`fixtures/signatures.json has no signature for ${name}`);
  return signature;
}

const hexDigest = (raw: Buffer | string, secret = SECRET) => createHmac("sha256", secret).update(raw).digest("hex");

describe("verifyMetaSignature on Meta's wire-format fixtures", () => {
  it("has a committed signature for every fixture body, and fixtures to check", () => {
    expect(fixtureNames.length).toBeGreaterThanOrEqual(3);
    expect(Object.keys(signatureFile.signatures).sort()).toEqual(fixtureNames);
  });

  it.each(fixtureNames)("%s verifies against its committed signature, hashed over the raw bytes", (name) => {
    expect(verifyMetaSignature(readRaw(name), committedSignature(name), SECRET)).toBe(true);
  });

  it.each(fixtureNames)("%s is refused under a different app secret", (name) => {
    expect(verifyMetaSignature(readRaw(name), committedSignature(name), "some-other-secret")).toBe(false);
  });

  it.each(fixtureNames)("%s with any single byte changed no longer verifies", (name) => {
    const raw = readRaw(name);
    const signature = committedSignature(name);
    // First byte, last byte and one in the middle: flipping one bit of any of them must fail.
    for (const index of [0, Math.floor(raw.length / 2), raw.length - 1]) {
      const tampered = Buffer.from(raw);
      tampered[index] = tampered[index]! ^ 0x01;
      expect(tampered.equals(raw)).toBe(false);
      expect(verifyMetaSignature(tampered, signature, SECRET)).toBe(false);
    }
  });

  it.each(fixtureNames)("%s with one extra trailing byte no longer verifies", (name) => {
    const raw = readRaw(name);
    expect(verifyMetaSignature(Buffer.concat([raw, Buffer.from("\n")]), committedSignature(name), SECRET)).toBe(false);
  });

  it.each(fixtureNames)("%s re-serialised with JSON.stringify(JSON.parse(raw)) would not verify: only the raw bytes carry the signature", (name) => {
    const raw = readRaw(name);
    const text = raw.toString("utf8");
    // The fixtures are Meta's wire format: pure ASCII, non-ASCII as \uXXXX, "/" as "\/".
    expect([...text].every((c) => c.charCodeAt(0) < 0x80)).toBe(true);
    expect(text).toMatch(/\\u[0-9a-f]{4}|\\\//);
    const reserialised = JSON.stringify(JSON.parse(text) as unknown);
    expect(reserialised).not.toBe(text);
    expect(verifyMetaSignature(Buffer.from(reserialised, "utf8"), committedSignature(name), SECRET)).toBe(false);
  });

  it.each(fixtureNames.filter((name) => readRaw(name).includes("\\/")))(
    '%s re-serialised even with non-ASCII escaped back to \\uXXXX still fails, because of the "\\/" escapes',
    (name) => {
      const text = readRaw(name).toString("utf8");
      const asciiOnly = JSON.stringify(JSON.parse(text) as unknown).replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
      expect(asciiOnly).not.toBe(text);
      expect(verifyMetaSignature(Buffer.from(asciiOnly, "utf8"), committedSignature(name), SECRET)).toBe(false);
    },
  );

  it("the emoji fixture carries its emoji as a UTF-16 surrogate pair, which JSON.parse turns into one code point", () => {
    const text = readRaw("text-unicode-emoji-slash.json").toString("utf8");
    expect(text).toContain("\\ud83d\\ude00");
    const body = JSON.parse(text) as { entry: { changes: { value: { messages: { text: { body: string } }[] } }[] }[] };
    expect(body.entry[0]!.changes[0]!.value.messages[0]!.text.body).toContain("😀");
  });

  it("decoding the raw bytes as UTF-8 and encoding them again is lossless, so the signature still verifies", () => {
    for (const name of fixtureNames) {
      const roundTripped = Buffer.from(readRaw(name).toString("utf8"), "utf8");
      expect(verifyMetaSignature(roundTripped, committedSignature(name), SECRET)).toBe(true);
    }
  });
});

describe("verifyMetaSignature on malformed X-Hub-Signature-256 headers", () => {
  const name = "text-unicode-emoji-slash.json";
  const raw = readRaw(name);
  const digest = hexDigest(raw);

  it("the committed signature is the lowercase hex HMAC-SHA256 of the raw bytes", () => {
    expect(committedSignature(name)).toBe(`sha256=${digest}`);
  });

  it("a missing header is refused", () => {
    expect(verifyMetaSignature(raw, undefined, SECRET)).toBe(false);
  });

  it("an empty header is refused", () => {
    expect(verifyMetaSignature(raw, "", SECRET)).toBe(false);
  });

  it('a header with the right digest but without the "sha256=" prefix is refused', () => {
    expect(verifyMetaSignature(raw, digest, SECRET)).toBe(false);
  });

  it('a header with another algorithm prefix ("sha1=") is refused', () => {
    expect(verifyMetaSignature(raw, `sha1=${digest}`, SECRET)).toBe(false);
  });

  it('"sha256=" with nothing after it is refused', () => {
    expect(verifyMetaSignature(raw, "sha256=", SECRET)).toBe(false);
  });

  it("a hex digest one byte too short is refused", () => {
    expect(verifyMetaSignature(raw, `sha256=${digest.slice(0, -2)}`, SECRET)).toBe(false);
  });

  it("a hex digest one byte too long is refused", () => {
    expect(verifyMetaSignature(raw, `sha256=${digest}00`, SECRET)).toBe(false);
  });

  it("an odd-length hex digest (the right digest plus one nibble) is refused", () => {
    expect(verifyMetaSignature(raw, `sha256=${digest}0`, SECRET)).toBe(false);
  });

  it("a digest of the right length that is not hex is refused", () => {
    expect(verifyMetaSignature(raw, `sha256=${"z".repeat(64)}`, SECRET)).toBe(false);
  });

  it("a well-formed but wrong digest is refused", () => {
    const wrong = (digest[0] === "0" ? "1" : "0") + digest.slice(1);
    expect(verifyMetaSignature(raw, `sha256=${wrong}`, SECRET)).toBe(false);
  });

  it("the digest of the body under a different secret is refused", () => {
    expect(verifyMetaSignature(raw, `sha256=${hexDigest(raw, "another-secret")}`, SECRET)).toBe(false);
  });

  it("uppercase hex of the correct digest verifies (hex is case-insensitive)", () => {
    expect(digest).toMatch(/[a-f]/);
    expect(verifyMetaSignature(raw, `sha256=${digest.toUpperCase()}`, SECRET)).toBe(true);
  });

  it("uppercase hex of a wrong digest is still refused", () => {
    expect(verifyMetaSignature(raw, `sha256=${hexDigest(raw, "another-secret").toUpperCase()}`, SECRET)).toBe(false);
  });

  it("an empty body verifies only against the digest of the empty body", () => {
    const empty = Buffer.alloc(0);
    expect(verifyMetaSignature(empty, `sha256=${hexDigest(empty)}`, SECRET)).toBe(true);
    expect(verifyMetaSignature(empty, `sha256=${digest}`, SECRET)).toBe(false);
  });
});
