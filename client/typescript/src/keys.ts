/**
 * The API key a client sends, checked before it is sent: a header carries printable ASCII only, and
 * a key copied from a page's placeholder (`cfk_…`) is not a key. Each refusal names where the key
 * came from (the `apiKey` option or `CONTEXTFOLD_API_KEY`).
 */

/** Thrown by `new ContextfoldClient(…)` for an API key that cannot be sent. */
export class InvalidApiKeyError extends Error {
  override name = "InvalidApiKeyError";
}

/** What is wrong with `key` as an API key; undefined when nothing is. */
export function keyProblem(key: string): string | undefined {
  if (key.trim() === "") return "is empty";
  const ellipsis = [...key].indexOf("\u2026");
  if (ellipsis >= 0) {
    return (
      `holds '…' (U+2026) at position ${ellipsis}: it is a page's placeholder (cfk_…), not a key;` +
      " create one with `contextfold keys create`"
    );
  }
  if (key.includes("...") || (key.startsWith("<") && key.endsWith(">")) || key.startsWith("$")) {
    return "looks like a placeholder, not a key; create one with `contextfold keys create`";
  }
  let position = 0;
  for (const char of key) {
    const code = char.codePointAt(0) ?? 0;
    if (code < 0x21 || code > 0x7e) {
      const hex = code.toString(16).toUpperCase().padStart(4, "0");
      return `holds U+${hex} at position ${position}, which a header cannot carry (a key is printable ASCII, no spaces)`;
    }
    position += 1;
  }
  return undefined;
}

/** `key`, unless it cannot be an API key: then an `InvalidApiKeyError` naming `source` and why. */
export function checkedKey(key: string, source: string): string {
  const problem = keyProblem(key);
  if (problem !== undefined) throw new InvalidApiKeyError(`the API key from ${source} ${problem}`);
  return key;
}
