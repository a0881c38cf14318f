// The official @anthropic-ai/sdk package against a running server's Anthropic Messages API:
//   node anthropic.mjs BASE_URL [STOCK_BASE_URL]
// A message with a system prompt, the same streamed through the SDK's stream helper (its text
// events must make the message it puts together) and as raw events, a tool the model must use,
// and a token count. The server needs a chat template with tools (Qwen3's).
// Exits non-zero with a message on the first check that fails.
import Anthropic from '@anthropic-ai/sdk';
import assert from 'node:assert/strict';
import { sameAsStock } from './common.mjs';

const weather = {
  name: 'get_weather',
  description: 'The weather in a city',
  input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
};

// What a client acts on in a message: its blocks, why it stopped, what it cost.
const messageOf = (m) => ({
  content: m.content.map((b) => (b.type === 'text' ? ['text', b.text]
    : b.type === 'tool_use' ? ['tool_use', b.name, b.input] : [b.type])),
  stop: m.stop_reason,
  usage: [m.usage.input_tokens, m.usage.output_tokens],
});

async function scenario(base) {
  const client = new Anthropic({ baseURL: base, apiKey: 'none', maxRetries: 0 });
  const ask = {
    model: 'any', max_tokens: 12, temperature: 0,
    system: 'Be brief.', messages: [{ role: 'user', content: 'What is the capital of France?' }],
  };
  const out = {};

  const plain = await client.messages.create(ask);
  assert.equal(plain.type, 'message');
  assert.equal(plain.role, 'assistant');
  out.message = messageOf(plain);

  // The SDK's stream helper: text events as they come, then the message it put together. (It
  // is not required to equal the plain message: llama-server's Messages API takes no
  // cache_prompt, so this request reads the plain one's prompt from the cache, computed in other
  // batch sizes, where a random model's greedy choice at a near-tie can follow the last bit.
  // Stock's answer to the same request after the same history is the reference.)
  const helper = client.messages.stream(ask);
  let text = '';
  helper.on('text', (t) => (text += t));
  const final = await helper.finalMessage();
  assert.equal(text, final.content.filter((b) => b.type === 'text').map((b) => b.text).join(''),
               'the text events make the final message');
  out.streamed = messageOf(final);

  // The raw events, in order (a run of the same event counted once).
  const events = [];
  for await (const e of await client.messages.create({ ...ask, stream: true })) {
    if (events.at(-1) !== e.type) events.push(e.type);
  }
  assert.equal(events[0], 'message_start');
  assert.equal(events.at(-1), 'message_stop');
  out.events = events;

  // A tool the model must use ("any"): a random model writes text instead, as on stock.
  out.tool = messageOf(await client.messages.create({
    ...ask, max_tokens: 32, tools: [weather], tool_choice: { type: 'any' },
    messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
  }));

  const count = await client.messages.countTokens({ model: 'any', system: ask.system, messages: ask.messages });
  assert.ok(count.input_tokens > 0);
  out.count = count.input_tokens;
  console.log(`anthropic: ${base}: ${JSON.stringify(out.message.content)}, stop ${out.message.stop}; ` +
              `events ${events.join(' ')}; tool answer stop ${out.tool.stop}`);
  return out;
}

await sameAsStock('anthropic', scenario);
