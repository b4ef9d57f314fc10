/**
 * Ghost text as you type, from a local model: JupyterLab's inline completion provider over the
 * service's OpenAI Completions endpoint (`POST lmsp/v1/completions`, streamed).
 *
 * Each request is aborted as soon as the text or the cursor of its editor changes (or a newer
 * request starts); the service then stops generating it at its next pass.
 */
import type {
  CompletionHandler,
  IInlineCompletionContext,
  IInlineCompletionItem,
  IInlineCompletionList,
  IInlineCompletionProvider
} from '@jupyterlab/completer';
import type { TranslationBundle } from '@jupyterlab/translation';
import type { ISettingRegistry } from '@jupyterlab/settingregistry';
import type { ReadonlyPartialJSONValue } from '@lumino/coreutils';

import { completionsUrl, listModels, sessionFetch } from '../protocol/api';
import type { ILmspModel } from '../protocol/types';
import { SseParser } from '../protocol/sse';
import { type ICellText, pickModel, promptParts } from './context';
import { editorContext } from './editor';

/** `InlineCompletionTriggerKind.Automatic` (a value import would load the completer package). */
const AUTOMATIC = 1;
/** How long the model listing is reused before it is asked for again, in ms. */
const MODELS_TTL = 30_000;

/** The provider's settings: JupyterLab's inline completer's (`enabled`, `debouncerDelay`,
 * `timeout`, `autoFillInMiddle`) and its own. */
export interface IInlineSettings {
  enabled: boolean;
  /** Milliseconds without typing before a suggestion is asked for. */
  debouncerDelay: number;
  timeout: number;
  autoFillInMiddle: boolean;
  /** The model to complete with; empty: a loaded FIM model, else the first loaded. */
  model: string;
  maxTokens: number;
  /** Tokens of context sent (cells above, the cell, text after the cursor), about. */
  contextTokens: number;
  /** `automatic`: as you type; `onRequest`: only when asked (Alt+\). */
  trigger: 'automatic' | 'onRequest';
}

export const DEFAULT_SETTINGS: IInlineSettings = {
  enabled: true,
  debouncerDelay: 200,
  timeout: 30_000,
  autoFillInMiddle: true,
  model: '',
  maxTokens: 64,
  contextTokens: 1500,
  trigger: 'automatic'
};

/** The text of a completion stream's `data` frames: each chunk's text, up to `[DONE]`. */
export async function* completionTexts(
  body: ReadableStream<Uint8Array>,
  signal: AbortSignal
): AsyncGenerator<string> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  const parser = new SseParser();
  try {
    while (!signal.aborted) {
      const { value, done } = await reader.read();
      if (done) {
        return;
      }
      for (const message of parser.feed(decoder.decode(value, { stream: true }))) {
        if (message.data === '[DONE]') {
          return;
        }
        const chunk = JSON.parse(message.data);
        if (chunk.error) {
          throw new Error(chunk.error.detail ?? 'the completion failed');
        }
        const text: string = chunk.choices?.[0]?.text ?? '';
        if (text) {
          yield text;
        }
      }
    }
  } finally {
    reader.releaseLock();
  }
}

/** The inline completion provider of the local models. */
export class LmspInlineProvider implements IInlineCompletionProvider {
  readonly identifier = 'lmsp-jupyter';
  readonly name: string;
  readonly schema: ISettingRegistry.IProperty;

  constructor(trans: TranslationBundle) {
    this.name = trans.__('Local model (LMSP)');
    this.schema = {
      default: { ...DEFAULT_SETTINGS },
      properties: {
        model: {
          title: trans.__('Model'),
          description: trans.__(
            'The model id to complete with. Empty: a loaded model that fills in the middle, else the first loaded model.'
          ),
          type: 'string'
        },
        maxTokens: {
          title: trans.__('Maximum tokens'),
          description: trans.__('The longest suggestion, in tokens.'),
          type: 'number',
          minimum: 1
        },
        contextTokens: {
          title: trans.__('Context tokens'),
          description: trans.__(
            'About how many tokens of the notebook are sent: the cells above (Markdown as comments), the cell up to the cursor and the text after it.'
          ),
          type: 'number',
          minimum: 16
        },
        trigger: {
          title: trans.__('Suggest'),
          description: trans.__(
            'As you type, or only when asked (Invoke Inline Completer, Alt+\\).'
          ),
          type: 'string',
          oneOf: [
            { const: 'automatic', title: trans.__('As you type') },
            { const: 'onRequest', title: trans.__('On request') }
          ]
        }
      }
    };
  }

  /** The settings in force. */
  get settings(): IInlineSettings {
    return this._settings;
  }

  configure(settings: { [property: string]: ReadonlyPartialJSONValue }): void {
    this._settings = { ...DEFAULT_SETTINGS, ...(settings as Partial<IInlineSettings>) };
  }

  async fetch(
    request: CompletionHandler.IRequest,
    context: IInlineCompletionContext
  ): Promise<IInlineCompletionList<IInlineCompletionItem>> {
    this._abort();
    const settings = this._settings;
    if (settings.trigger === 'onRequest' && context.triggerKind === AUTOMATIC) {
      return { items: [] };
    }
    const controller = new AbortController();
    this._inFlight = controller;
    const editor = editorContext(context.widget, () => controller.abort());
    controller.signal.addEventListener('abort', () => editor.disconnect());
    const above: ICellText[] = editor.above;
    const before = request.text.slice(0, request.offset);
    const after = request.text.slice(request.offset);
    const parts = promptParts(above, before, after, editor.language, settings.contextTokens);
    try {
      const model = pickModel(await this._models(), settings.model);
      if (model === null || controller.signal.aborted) {
        return { items: [] };
      }
      const response = await sessionFetch(completionsUrl(), {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({
          model,
          prompt: parts.prompt,
          suffix: parts.suffix,
          max_tokens: settings.maxTokens,
          temperature: 0,
          stop: ['\n\n\n'],
          stream: true
        }),
        signal: controller.signal
      });
      if (!response.ok || response.body === null) {
        controller.abort();
        return { items: [] };
      }
      const token = String(++this._requests);
      this._streams.set(token, completionTexts(response.body, controller.signal));
      return { items: [{ insertText: '', isIncomplete: true, token }] };
    } catch {
      controller.abort();
      return { items: [] };
    }
  }

  async *stream(token: string): AsyncGenerator<{ response: IInlineCompletionItem }> {
    const texts = this._streams.get(token);
    this._streams.delete(token);
    if (texts === undefined) {
      return;
    }
    let insertText = '';
    try {
      for await (const text of texts) {
        insertText += text;
        yield { response: { insertText, isIncomplete: true } };
      }
    } catch {
      // aborted (typed on, moved) or failed: what came so far stays shown
    }
    yield { response: { insertText, isIncomplete: false } };
  }

  /** Abort the request in flight, if any. */
  private _abort(): void {
    this._inFlight?.abort();
    this._inFlight = null;
    this._streams.clear();
  }

  private async _models(): Promise<ILmspModel[]> {
    const now = Date.now();
    if (this._listed === null || now - this._listedAt > MODELS_TTL) {
      this._listed = listModels().then(list => list.models);
      this._listedAt = now;
      this._listed.catch(() => {
        this._listed = null;
      });
    }
    return this._listed;
  }

  private _settings: IInlineSettings = DEFAULT_SETTINGS;
  private _inFlight: AbortController | null = null;
  private _streams = new Map<string, AsyncGenerator<string>>();
  private _requests = 0;
  private _listed: Promise<ILmspModel[]> | null = null;
  private _listedAt = 0;
}
