/**
 * Text that shares no word with the knowledge tests' questions, except the common words "the"
 * and "is" in every sentence (the 'simple' configuration keeps them; retrieval must see past
 * them). The same seed gives the same text.
 */
export function filler(seed: number, wordCount: number): string {
  const syllables = ["ka", "lo", "mi", "ne", "pu", "zo", "vi", "da", "ge", "bo"];
  let state = seed * 7919 + 13;
  const next = () => {
    state = (state * 1103515245 + 12345) % 2147483648;
    return state;
  };
  const out: string[] = [];
  while (out.length < wordCount) {
    const word = () => Array.from({ length: 2 + (next() % 3) }, () => syllables[next() % syllables.length]).join("");
    out.push("the", word(), "is", word(), `${word()}.`);
  }
  return out.slice(0, wordCount).join(" ");
}
