/** The MIME type of an ask's durable state, the output of `%lmsp ask`. */
export const MIME_TYPE = 'application/vnd.lmsp.task+json';
