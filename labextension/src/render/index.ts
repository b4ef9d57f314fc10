/**
 * The shared rendering of LMSP answers, used by the anywidget view and the MIME renderer; the
 * protocol's types are `../protocol/types`.
 */
export { Answer } from './answer';
export { markdownToHtml, renderMarkdown } from './markdown';
export {
  applyEvents,
  emptyRound,
  isFinal,
  roundFromResponse,
  tokensPerSecond,
  type IItemView,
  type IRoundTiming,
  type IRoundView
} from './reducer';
export { formatRate, noteRoundRate, roundRate } from './rates';
export { AnswerView, type IAnswerActions, type IAnswerViewOptions } from './view';
