// OpenAI's JavaScript clients against a live lmsp-jupyter server: the `openai` SDK and the
// Vercel AI SDK. Reads LMSP_BASE_URL, LMSP_TOKEN and LMSP_MODEL; prints one JSON object of
// what each call gave, for tests/compat/test_openai_js.py to check.
import { createOpenAI } from '@ai-sdk/openai';
import { generateObject, generateText, streamText } from 'ai';
import OpenAI from 'openai';
import { zodTextFormat } from 'openai/helpers/zod';
import { z } from 'zod';

const baseURL = process.env.LMSP_BASE_URL;
const apiKey = process.env.LMSP_TOKEN;
const model = process.env.LMSP_MODEL;
const small = { model, temperature: 0, max_output_tokens: 8 };
const Verdict = z.object({ sunny: z.boolean() });

const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
const results = {};

const created = await client.responses.create({ ...small, input: 'The sky is' });
results.create = { id: created.id, status: created.status, text: created.output_text };

const events = [];
for await (const event of await client.responses.create({
  ...small,
  input: 'The sky is',
  stream: true
})) {
  events.push({ type: event.type, sequence_number: event.sequence_number });
}
results.stream = events;

const stream = client.responses.stream({
  ...small,
  max_output_tokens: 40,
  input: 'Is the sky blue?',
  text: { format: zodTextFormat(Verdict, 'verdict') }
});
const final = await stream.finalResponse();
results.streamHelper = { status: final.status, parsed: final.output_parsed };

const chunks = [];
for await (const chunk of await client.chat.completions.create({
  model,
  temperature: 0,
  max_tokens: 8,
  messages: [{ role: 'user', content: 'The sky is' }],
  stream: true,
  stream_options: { include_usage: true }
})) {
  chunks.push(chunk);
}
results.chat = {
  text: chunks.map(c => c.choices[0]?.delta?.content ?? '').join(''),
  finish: chunks.at(-2)?.choices[0]?.finish_reason,
  usage: chunks.at(-1)?.usage
};

try {
  await client.responses.create({ model: 'no-such-model', input: 'Hi' });
  results.error = null;
} catch (error) {
  results.error = {
    notFound: error instanceof OpenAI.NotFoundError,
    status: error.status,
    code: error.code
  };
}

const provider = createOpenAI({ baseURL, apiKey });
const settings = { temperature: 0, maxOutputTokens: 8, maxRetries: 0 };

const text = await generateText({ ...settings, model: provider(model), prompt: 'The sky is' });
results.generateText = { text: text.text, finishReason: text.finishReason, usage: text.usage };

const chatText = await generateText({
  ...settings,
  model: provider.chat(model),
  prompt: 'The sky is'
});
results.generateTextChat = { text: chatText.text, finishReason: chatText.finishReason };

const streamed = streamText({ ...settings, model: provider(model), prompt: 'The sky is' });
let streamedText = '';
for await (const piece of streamed.textStream) {
  streamedText += piece;
}
results.streamText = { text: streamedText, finishReason: await streamed.finishReason };

const object = await generateObject({
  ...settings,
  maxOutputTokens: 40,
  model: provider(model),
  schema: Verdict,
  prompt: 'Is the sky blue?'
});
results.generateObject = { object: object.object, finishReason: object.finishReason };

console.log(JSON.stringify(results));
