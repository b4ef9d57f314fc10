/**
 * Suggestions on a new line: JupyterLab's inline completer asks as you type only at the end of
 * a line with text on it, never on the empty (indented) line a newline opens, where a code
 * model has the most to say (the body after `def f(x):`). A newline typed in a notebook cell
 * invokes the inline completer, once the debounce delay has passed with no other change.
 */
import type { INotebookTracker } from '@jupyterlab/notebook';
import type { CommandRegistry } from '@lumino/commands';

import type { IInlineSettings } from './provider';

/** JupyterLab's command that asks the inline completion providers for a suggestion now. */
const INVOKE = 'inline-completer:invoke';

/** The change of a cell's text: what each step inserted. */
interface ITextChange {
  sourceChange?: { insert?: string }[] | null;
}

/** The signal shape of a cell's shared model's `changed`. */
interface IChangedSignal {
  connect(slot: (sender: unknown, change: ITextChange) => void): boolean;
  disconnect(slot: (sender: unknown, change: ITextChange) => void): boolean;
}

/** Watch the active cell of `tracker`: a newline typed in it (its editor has the focus: not
 * a change made by code) invokes the inline completer while `settings()` say the provider is
 * on and suggests as you type. */
export function suggestOnNewLine(
  tracker: INotebookTracker,
  commands: CommandRegistry,
  settings: () => IInlineSettings
): void {
  let watched: IChangedSignal | null = null;
  let typing: () => boolean = () => false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const changed = (sender: unknown, change: ITextChange): void => {
    clearTimeout(timer);
    const { enabled, trigger, debouncerDelay } = settings();
    const newline = change.sourceChange?.some(step => step.insert?.includes('\n')) ?? false;
    if (newline && enabled && trigger === 'automatic' && typing()) {
      timer = setTimeout(() => void commands.execute(INVOKE), debouncerDelay);
    }
  };
  tracker.activeCellChanged.connect((_, cell) => {
    clearTimeout(timer);
    watched?.disconnect(changed);
    watched = (cell?.model.sharedModel.changed as unknown as IChangedSignal) ?? null;
    typing = () => cell?.editor?.hasFocus() ?? false;
    watched?.connect(changed);
  });
}
