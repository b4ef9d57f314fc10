/**
 * The edit-a-cell request: the raw prompt a base model continues, the predicted output (the old
 * source) and the stop at the closing fence. The kernel's `%lmsp edit` builds the same text; the
 * shared contract is `tests/fixtures/edit_prompt.json`.
 */

/** Where generation stops: the fence closing the new source. */
export const EDIT_STOP = ['```'];

/** An edit request's text: what the model continues, and what it is expected to write. */
export interface IEditPrompt {
  prompt: string;
  prediction: string;
}

/** The source without its trailing newlines, as it goes between the fences. */
function fenced(source: string): string {
  return source.replace(/\n+$/, '');
}

/** The prompt and prediction of editing `source` (in `language`) by `instruction`. */
export function editPrompt(instruction: string, source: string, language: string): IEditPrompt {
  const body = fenced(source);
  return {
    prompt:
      `Instruction: ${instruction.trim()}\n\n` +
      `Before:\n\`\`\`${language}\n${body}\n\`\`\`\n\n` +
      `After:\n\`\`\`${language}\n`,
    prediction: `${body}\n${EDIT_STOP[0]}`
  };
}

/** The new source in a generated text: the text before the stop, without its last newline. */
export function editedSource(generated: string): string {
  const stop = generated.indexOf(EDIT_STOP[0]);
  const before = stop < 0 ? generated : generated.slice(0, stop);
  return before.endsWith('\n') ? before.slice(0, -1) : before;
}
