/** The shared rendering of LMSP answers, used by the anywidget view and the MIME renderer. */
export { Answer } from './answer';
export { markdownToHtml, renderMarkdown } from './markdown';
export {
  applyEvents,
  emptyRound,
  formatRate,
  isFinal,
  noteRoundRate,
  roundFromResponse,
  roundRate,
  tokensPerSecond,
  type IItemView,
  type IRoundTiming,
  type IRoundView
} from './reducer';
export * from './types';
export { AnswerView, type IAnswerActions, type IAnswerViewOptions } from './view';
