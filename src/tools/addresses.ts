import { isIP } from "node:net";

/**
 * The SSRF guard's test: whether an address is on the public internet. A tool's URL comes from
 * the business's file, but its host's DNS is theirs (or anyone's who controls it), and a call
 * that reached our own network would carry Claude's input to whatever listens there: Redis,
 * Postgres, the metrics port, a cloud's metadata service (169.254.169.254) and its credentials.
 * So everything that is not plainly public is refused, including the IPv6 forms that carry an
 * IPv4 address inside them.
 */

/** [first address, prefix length] of each IPv4 block that is not the public internet (IANA's special-purpose registry). */
const NOT_PUBLIC_V4: readonly [string, number][] = [
  ["0.0.0.0", 8], // "this network"
  ["10.0.0.0", 8], // private (RFC 1918)
  ["100.64.0.0", 10], // carrier-grade NAT
  ["127.0.0.0", 8], // loopback
  ["169.254.0.0", 16], // link-local: cloud metadata services
  ["172.16.0.0", 12], // private (RFC 1918)
  ["192.0.0.0", 24], // IETF protocol assignments
  ["192.0.2.0", 24], // documentation
  ["192.88.99.0", 24], // 6to4 relays
  ["192.168.0.0", 16], // private (RFC 1918)
  ["198.18.0.0", 15], // benchmarking
  ["198.51.100.0", 24], // documentation
  ["203.0.113.0", 24], // documentation
  ["224.0.0.0", 4], // multicast
  ["240.0.0.0", 4], // reserved, and the broadcast address
];

export function isPublicAddress(address: string): boolean {
  const family = isIP(address);
  if (family === 4) return isPublicV4(v4Bytes(address));
  if (family === 6) return isPublicV6(v6Bytes(address));
  return false;
}

function isPublicV4(bytes: readonly number[]): boolean {
  const value = v4Number(bytes);
  return !NOT_PUBLIC_V4.some(([first, bits]) => value >>> (32 - bits) === v4Number(v4Bytes(first)) >>> (32 - bits));
}

function isPublicV6(b: readonly number[]): boolean {
  const zerosTo = (end: number) => b.slice(0, end).every((byte) => byte === 0);
  // IPv4-mapped (::ffff:a.b.c.d): a connection to it is a connection to the IPv4 address.
  if (zerosTo(10) && b[10] === 0xff && b[11] === 0xff) return isPublicV4(b.slice(12));
  // NAT64 (64:ff9b::/96): the gateway connects to the IPv4 address inside.
  if (b[0] === 0x00 && b[1] === 0x64 && b[2] === 0xff && b[3] === 0x9b && b.slice(4, 12).every((byte) => byte === 0)) return isPublicV4(b.slice(12));
  // 6to4 (2002::/16): the IPv4 address follows the prefix.
  if (b[0] === 0x20 && b[1] === 0x02) return isPublicV4(b.slice(2, 6));
  // Only global unicast (2000::/3) is the public internet: this leaves out ::, ::1, unique-local
  // fc00::/7, link-local fe80::/10, multicast ff00::/8, the deprecated IPv4-compatible ::/96,
  // local-use NAT64 64:ff9b:1::/48 and discard 100::/64.
  if ((b[0]! & 0xe0) !== 0x20) return false;
  const prefix = (b[0]! << 8) | b[1]!;
  const second = (b[2]! << 8) | b[3]!;
  if (prefix === 0x2001 && second === 0x0000) return false; // Teredo: an IPv4 address in disguise
  if (prefix === 0x2001 && second === 0x0db8) return false; // documentation
  if (prefix === 0x2001 && second === 0x0002 && b[4] === 0 && b[5] === 0) return false; // benchmarking 2001:2::/48
  if (prefix === 0x2001 && ((second & 0xfff0) === 0x0010 || (second & 0xfff0) === 0x0020)) return false; // ORCHID 2001:10::/28, 2001:20::/28
  if (prefix === 0x3fff && (b[2]! & 0xf0) === 0) return false; // documentation 3fff::/20
  return true;
}

function v4Bytes(address: string): number[] {
  return address.split(".").map(Number);
}

function v4Number(bytes: readonly number[]): number {
  return ((bytes[0]! << 24) | (bytes[1]! << 16) | (bytes[2]! << 8) | bytes[3]!) >>> 0;
}

/** The 16 bytes of an IPv6 address that isIP accepted: "::" expanded, a dotted IPv4 tail read, a zone dropped. */
function v6Bytes(address: string): number[] {
  let text = address.split("%")[0] ?? "";
  const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(text)?.[1];
  if (dotted) {
    const [a = 0, b = 0, c = 0, d = 0] = v4Bytes(dotted);
    text = `${text.slice(0, -dotted.length)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head = "", tail] = text.split("::");
  const headGroups = head === "" ? [] : head.split(":");
  const tailGroups = tail === undefined || tail === "" ? [] : tail.split(":");
  const groups = tail === undefined ? headGroups : [...headGroups, ...Array<string>(8 - headGroups.length - tailGroups.length).fill("0"), ...tailGroups];
  return groups.flatMap((group) => {
    const value = Number.parseInt(group, 16);
    return [value >> 8, value & 0xff];
  });
}
