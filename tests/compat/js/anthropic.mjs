// Anthropic's TypeScript SDK against the Messages API of a live lmsp-jupyter server. Reads
// ANTHROPIC_BASE_URL, LMSP_TOKEN and LMSP_MODEL; prints one JSON object of what each call
// gave, for tests/compat/test_anthropic_js.py to check.
import Anthropic from '@anthropic-ai/sdk';

const client = new Anthropic({
  baseURL: process.env.ANTHROPIC_BASE_URL,
  apiKey: process.env.LMSP_TOKEN,
  maxRetries: 0
});
const ask = {
  model: process.env.LMSP_MODEL,
  max_tokens: 8,
  temperature: 0,
  messages: [{ role: 'user', content: 'Name three colours.' }]
};
const results = {};

const created = await client.messages.create(ask);
results.create = {
  text: created.content.map(block => block.text).join(''),
  stopReason: created.stop_reason,
  usage: created.usage
};

const events = [];
for await (const event of await client.messages.create({ ...ask, stream: true })) {
  events.push(event.type);
}
results.events = events;

const pieces = [];
const stream = client.messages.stream(ask);
stream.on('text', text => pieces.push(text));
const final = await stream.finalMessage();
results.stream = {
  text: pieces.join(''),
  final: final.content.map(block => block.text).join(''),
  stopReason: final.stop_reason
};

try {
  await client.messages.create({ ...ask, max_tokens: 0 });
} catch (error) {
  results.error = { status: error.status, body: error.error };
}

console.log(JSON.stringify(results));
