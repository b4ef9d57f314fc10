// The `ollama` npm library against a live lmsp-jupyter server's Ollama API. Reads OLLAMA_HOST,
// LMSP_TOKEN and LMSP_MODEL; prints one JSON object of what each call gave, for
// tests/compat/test_ollama_js.py to check.
import { Ollama } from 'ollama';

const model = process.env.LMSP_MODEL;
const ollama = new Ollama({
  host: process.env.OLLAMA_HOST,
  headers: { Authorization: `Bearer ${process.env.LMSP_TOKEN}` }
});
const greedy = { temperature: 0, num_predict: 8 };
const messages = [{ role: 'user', content: 'Name a colour.' }];
const results = {};

results.version = (await ollama.version()).version;
results.list = (await ollama.list()).models.map(m => m.model);
const shown = await ollama.show({ model });
results.show = { capabilities: shown.capabilities, family: shown.details.family };

const whole = await ollama.chat({ model, messages, options: greedy });
const chunks = [];
for await (const chunk of await ollama.chat({ model, messages, options: greedy, stream: true })) {
  chunks.push(chunk);
}
results.chat = {
  whole: whole.message.content,
  streamed: chunks.map(c => c.message.content).join(''),
  done: chunks.at(-1).done,
  doneReason: chunks.at(-1).done_reason,
  evalCount: chunks.at(-1).eval_count
};

const generated = await ollama.generate({ model, prompt: 'The sky is', options: greedy });
results.generate = { text: generated.response, doneReason: generated.done_reason };

// The bundled model has no fill-in-the-middle tokens: a suffix is left out, as Ollama does,
// so generating with one reads the same prompt as raw text without it.
const code = 'def add(a, b):\n    ';
const suffix = '\n\nprint(add(1, 2))';
const suffixed = await ollama.generate({ model, prompt: code, suffix, options: greedy });
const raw = await ollama.generate({ model, prompt: code, raw: true, options: greedy });
results.suffix = {
  text: suffixed.response,
  raw: raw.response,
  promptTokens: suffixed.prompt_eval_count,
  rawPromptTokens: raw.prompt_eval_count,
  doneReason: suffixed.done_reason
};

const schema = {
  type: 'object',
  properties: { sunny: { type: 'boolean' } },
  required: ['sunny'],
  additionalProperties: false
};
const formatted = await ollama.chat({
  model,
  messages: [{ role: 'user', content: 'Is it sunny in Paris?' }],
  format: schema,
  options: { num_predict: 64 }
});
results.format = { content: formatted.message.content, doneReason: formatted.done_reason };

const tools = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'The weather in a city.',
      parameters: {
        type: 'object',
        properties: { city: { type: 'string' } },
        required: ['city']
      }
    }
  }
];
const called = await ollama.chat({
  model,
  messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
  tools,
  options: { num_predict: 48 }
});
results.tools = {
  done: called.done,
  calls: (called.message.tool_calls ?? []).map(c => ({
    name: c.function.name,
    arguments: c.function.arguments
  }))
};

results.ps = (await ollama.ps()).models.map(m => m.model);

try {
  await ollama.chat({ model: 'no-such-model', messages });
  results.error = null;
} catch (error) {
  results.error = { status: error.status_code, message: error.error };
}

console.log(JSON.stringify(results));
