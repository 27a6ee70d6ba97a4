/** ioredis's own slot calculator (CRC16 of the key's hash tag, mod 16384); the package ships no types. */
declare module "cluster-key-slot" {
  export default function calculateSlot(key: string | Buffer): number;
}
