// The `ollama` npm library's `embed` against a live lmsp-jupyter server whose model embeds.
// Reads OLLAMA_HOST, LMSP_TOKEN, LMSP_MODEL and LMSP_TEXTS (a JSON list); prints one JSON object
// for tests/server/test_embeddings.py to check.
import { Ollama } from 'ollama';

const model = process.env.LMSP_MODEL;
const texts = JSON.parse(process.env.LMSP_TEXTS);
const ollama = new Ollama({
  host: process.env.OLLAMA_HOST,
  headers: { Authorization: `Bearer ${process.env.LMSP_TOKEN}` }
});
const results = {};

const many = await ollama.embed({ model, input: texts });
results.many = { embeddings: many.embeddings, promptEvalCount: many.prompt_eval_count };
results.one = (await ollama.embed({ model, input: texts[0] })).embeddings;
try {
  await ollama.embed({ model, input: 'word '.repeat(3000), truncate: false });
  results.error = null;
} catch (error) {
  results.error = { status: error.status_code, message: error.error };
}

console.log(JSON.stringify(results));
