/** The shared rendering of LMSP answers, used by the anywidget view and the MIME renderer. */
export { Answer } from './answer';
export { markdownToHtml, renderMarkdown } from './markdown';
export {
  applyEvents,
  emptyRound,
  formatRate,
  isFinal,
  roundFromResponse,
  tokensPerSecond,
  type ItemView,
  type RoundTiming,
  type RoundView
} from './reducer';
export * from './types';
export { AnswerView, type AnswerActions, type AnswerViewOptions } from './view';
