/**
 * Replies far over WhatsApp's 4096 units, of every kind of text a reply is made of: what
 * test/split.test.ts checks splitForWhatsApp on, and bench/split.ts times it on.
 */
export const LONG_REPLY_KINDS = {
  "ASCII prose":
    "Your order #4521 left our warehouse this morning and should reach you within two working days. " +
    "If it does not, write to us here and we will look into it at once.\n\nThanks for shopping with us! ",
  "ASCII without whitespace": "https://shop.example.com/track?order=4521&token=3f9c2a7e1b8d4c6a9e0f5b2d7c1a8e4f&lang=en-GB#status/",
  emoji: "😀🎉👍🔥🙏❤️✨🚚📦✅",
  "emoji ZWJ sequences": "👨‍👩‍👧‍👦👩‍❤️‍💋‍👨🏳️‍🌈🧑‍💻👁️‍🗨️",
  flags: "🇵🇹🇧🇷🇺🇸🇯🇵🇪🇸",
  "skin-tone modifiers": "👍🏽👋🏿🙌🏻🧑🏾‍🍳💪🏼",
  // Decomposed letters under up to four marks each, and no whitespace: every cut is between clusters.
  "combining marks": "e\u0301a\u0300o\u0302\u0301u\u031b\u0323n\u0303Z\u0324\u0354\u0367\u0311i\u0308\u0301",
  CJK: "您的订单已经发货，预计两天内送达。如有问题请随时联系我们。ご注文ありがとうございます。",
  mixed: "Olá 👋🏽! A sua encomenda 🇵🇹 chegou. 价格：€10. cafe\u0301 👨‍👩‍👧‍👦 한국어 문장입니다.\n",
} as const;

export type LongReplyKind = keyof typeof LONG_REPLY_KINDS;

/** Whole repetitions of the kind's sample, as many as fit in `units` UTF-16 units. */
export function longReply(kind: LongReplyKind, units = 100_000): string {
  const sample = LONG_REPLY_KINDS[kind];
  return sample.repeat(Math.floor(units / sample.length));
}
