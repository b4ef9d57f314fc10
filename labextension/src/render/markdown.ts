/**
 * Model output as Markdown. The text is untrusted: the HTML marked produces is
 * sanitized before it reaches the DOM.
 */
import DOMPurify from 'dompurify';
// eslint-disable-next-line jupyter/prefer-lazy-imports -- the view renders each streamed delta synchronously, so marked is needed as soon as an answer shows
import { Marked } from 'marked';

// A line break the model writes is one the reader sees: a base model continuing rows of a
// pattern writes one row a line.
const marked = new Marked({ gfm: true, breaks: true, async: false });

/** Sanitized HTML of `text` read as Markdown. */
export function markdownToHtml(text: string): string {
  const html = marked.parse(text, { async: false });
  return DOMPurify.sanitize(html.trim(), {
    USE_PROFILES: { html: true },
    FORBID_TAGS: ['style', 'form', 'input', 'button', 'textarea', 'select'],
    FORBID_ATTR: ['style']
  });
}

/** Render `text` as Markdown into `node`, replacing what it held. */
export function renderMarkdown(node: HTMLElement, text: string): void {
  node.innerHTML = markdownToHtml(text);
  for (const link of Array.from(node.querySelectorAll('a[href]'))) {
    link.setAttribute('target', '_blank');
    link.setAttribute('rel', 'noopener noreferrer');
  }
}

const VOID_ELEMENTS = new Set([
  'AREA',
  'BR',
  'COL',
  'EMBED',
  'HR',
  'IMG',
  'INPUT',
  'SOURCE',
  'WBR'
]);

/**
 * Where text that follows the rendered Markdown goes until the next render: the last
 * element that can hold text, so a streamed word continues its paragraph.
 */
export function textEnd(node: HTMLElement): Element {
  let end: Element = node;
  while (end.lastElementChild && !VOID_ELEMENTS.has(end.lastElementChild.tagName)) {
    end = end.lastElementChild;
  }
  return end;
}
