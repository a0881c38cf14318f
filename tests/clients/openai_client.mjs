// The official openai package against a running epq serve: node openai_client.mjs BASE_URL KEY
// Exits non-zero with a message on the first check that fails.
import OpenAI from 'openai';
import assert from 'node:assert/strict';

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
const messages = [{ role: 'user', content: 'Write a short poem about disks.' }];

// Non-streaming chat.
const whole = await client.chat.completions.create({ model: 'any', messages, max_tokens: 12, temperature: 0 });
assert.equal(whole.object, 'chat.completion');
assert.equal(whole.choices[0].message.role, 'assistant');
assert.equal(typeof whole.choices[0].message.content, 'string');
assert.ok(['stop', 'length'].includes(whole.choices[0].finish_reason));
assert.ok(whole.usage.prompt_tokens > 0 && whole.usage.completion_tokens > 0);
console.log(`non-stream: ${whole.usage.completion_tokens} tokens, finish ${whole.choices[0].finish_reason}`);

// Streaming chat: one id, the role first, a finish reason last, then usage; same text.
const stream = await client.chat.completions.create({
  model: 'any', messages, max_tokens: 12, temperature: 0, stream: true, stream_options: { include_usage: true },
});
let text = '', ids = new Set(), role = null, finish = null, usage = null;
for await (const chunk of stream) {
  ids.add(chunk.id);
  if (chunk.usage) usage = chunk.usage;
  const c = chunk.choices[0];
  if (!c) continue;
  if (c.delta.role) role = role ?? c.delta.role;
  if (c.delta.content) text += c.delta.content;
  if (c.finish_reason) finish = c.finish_reason;
}
assert.equal(ids.size, 1, 'every chunk carries the same id');
assert.equal(role, 'assistant');
assert.equal(finish, whole.choices[0].finish_reason);
assert.equal(text, whole.choices[0].message.content, 'streamed text equals the non-streamed text');
assert.equal(usage.completion_tokens, whole.usage.completion_tokens);
console.log(`stream: same text, ${ids.size} id, usage chunk present`);

// Legacy completions.
const comp = await client.completions.create({ model: 'any', prompt: 'Once upon a time', max_tokens: 5, temperature: 0 });
assert.equal(comp.object, 'text_completion');
assert.equal(comp.usage.completion_tokens, 5);

// Abort mid-stream: the server frees the slot.
const controller = new AbortController();
const long = await client.chat.completions.create(
  { model: 'any', messages, max_tokens: 100000, ignore_eos: true, stream: true },
  { signal: controller.signal });
let seen = 0, finishedBeforeAbort = null;
try {
  for await (const chunk of long) {
    // Chunks already buffered may still arrive after abort(); only those before it count.
    if (controller.signal.aborted) continue;
    finishedBeforeAbort = chunk.choices[0]?.finish_reason ?? finishedBeforeAbort;
    if (chunk.choices[0]?.delta?.content && ++seen === 3) controller.abort();
  }
} catch (e) {
  // Depending on where the abort lands, the SDK ends the iteration or throws its abort error.
  assert.ok(e instanceof OpenAI.APIUserAbortError || e.name === 'AbortError', `abort: ${e}`);
}
assert.equal(seen, 3, 'the stream ended before it was aborted');
assert.equal(finishedBeforeAbort, null, 'the stream finished on its own');
const slotsURL = baseURL.replace(/\/v1$/, '') + '/slots';
let busy = true;
for (let i = 0; i < 100 && busy; ++i) {
  const slots = await (await fetch(slotsURL, { headers: { Authorization: `Bearer ${apiKey}` } })).json();
  busy = slots.some((s) => s.is_processing);
  if (busy) await new Promise((r) => setTimeout(r, 50));
}
assert.equal(busy, false, 'the aborted request still holds a slot');
console.log(`abort: slot freed after ${seen} chunks`);

// Two turns: the second pays only for the new turn.
const turn1 = await client.chat.completions.create({ model: 'any', messages, max_tokens: 8, temperature: 0 });
const history = [...messages, turn1.choices[0].message, { role: 'user', content: 'Now make it rhyme.' }];
const turn2 = await client.chat.completions.create({ model: 'any', messages: history, max_tokens: 8, temperature: 0 });
const cached = turn2.usage.prompt_tokens_details?.cached_tokens ?? 0;
assert.ok(cached >= turn1.usage.prompt_tokens, `turn 2 cached ${cached} of ${turn2.usage.prompt_tokens}`);
console.log(`two turns: turn 2 prompt ${turn2.usage.prompt_tokens} tokens, ${cached} from the cache`);

// Errors as the SDK's typed exceptions.
await assert.rejects(client.chat.completions.create({ model: 'any', messages: [] }), (e) => e.status === 400);
const wrong = new OpenAI({ baseURL, apiKey: 'wrong', maxRetries: 0 });
await assert.rejects(wrong.chat.completions.create({ model: 'any', messages }),
  (e) => e instanceof OpenAI.AuthenticationError);
const models = await wrong.models.list();  // public
assert.equal(models.data.length, 1);
console.log('errors: 400 and 401 as typed exceptions; /v1/models public');
