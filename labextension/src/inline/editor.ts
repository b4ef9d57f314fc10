/**
 * Where an inline completion is asked: the cells above the cursor, the kernel's language, and
 * a watch on the editor that calls back once its text or cursor changes.
 *
 * Typed by shape (a notebook panel's `content.widgets` and `activeCellIndex`, an editor's
 * `model`) so that no JupyterLab package is loaded for it; a console or a file editor has no
 * cells above.
 */
import type { Widget } from '@lumino/widgets';

import type { ICellText } from './context';

/** The signal shape of Lumino's `ISignal`. */
interface ISignalLike {
  connect(slot: () => void): boolean;
  disconnect(slot: () => void): boolean;
}

/** What is read of a cell: its kind, its text, and its editor's model. */
interface ICellLike {
  model: { type: string; sharedModel: { getSource(): string } };
  editor: {
    model: { sharedModel: { changed: ISignalLike }; selections: { changed: ISignalLike } };
  } | null;
}

/** What is read of a notebook panel. */
interface INotebookLike {
  content: { widgets: readonly ICellLike[]; activeCellIndex: number };
  model?: { getMetadata(key: string): any } | null;
}

/** The cells above the cursor and the language, and how to stop watching the editor. */
export interface IEditorContext {
  above: ICellText[];
  language: string;
  disconnect(): void;
}

function isNotebook(widget: Widget): widget is Widget & INotebookLike {
  const content = (widget as Partial<INotebookLike>).content;
  return content !== undefined && Array.isArray(content.widgets) && 'activeCellIndex' in content;
}

function cellText(cell: ICellLike): ICellText {
  const type = cell.model.type;
  return {
    kind: type === 'markdown' ? 'markdown' : type === 'raw' ? 'raw' : 'code',
    source: cell.model.sharedModel.getSource()
  };
}

/**
 * The context of a completion in `widget`; `changed` is called (once) when the active editor's
 * text or cursor changes, until `disconnect`.
 */
export function editorContext(widget: Widget, changed: () => void): IEditorContext {
  if (!isNotebook(widget)) {
    return { above: [], language: 'python', disconnect: () => undefined };
  }
  const { widgets, activeCellIndex } = widget.content;
  const above = widgets.slice(0, Math.max(activeCellIndex, 0)).map(cellText);
  const info = widget.model?.getMetadata('language_info');
  const spec = widget.model?.getMetadata('kernelspec');
  const language: string = info?.name ?? spec?.language ?? 'python';
  const model = widgets[activeCellIndex]?.editor?.model;
  if (!model) {
    return { above, language, disconnect: () => undefined };
  }
  const signals = [model.sharedModel.changed, model.selections.changed];
  let watching = true;
  const disconnect = (): void => {
    if (watching) {
      watching = false;
      signals.forEach(signal => signal.disconnect(once));
    }
  };
  const once = (): void => {
    disconnect();
    changed();
  };
  signals.forEach(signal => signal.connect(once));
  return { above, language, disconnect };
}
