// The official openai package against a running server:
//   node openai_client.mjs BASE_URL [STOCK_BASE_URL]
// Chat streamed and not, tools (required, auto, and a conversation that carries a tool call and
// its result), a json_schema response format, the Responses API streamed and not, legacy
// completions, a second turn served from the prompt cache, typed errors, then an abort: a
// stream given up midway must give its slot back. The server needs a chat template with tools
// (Qwen3's) and at least 2 slots. A random-weight model rarely writes a well-formed tool call
// (llama.cpp's grammar lets text come before a required call), and stock then returns text
// too: what counts is the same answer.
// Exits non-zero with a message on the first check that fails.
import OpenAI from 'openai';
import assert from 'node:assert/strict';
import { sameAsStock, slotsIdle } from './common.mjs';

const weather = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};
const person = {
  type: 'object',
  properties: { name: { type: 'string', maxLength: 12 }, age: { type: 'integer' } },
  required: ['name', 'age'],
  additionalProperties: false,
};
const poem = [{ role: 'user', content: 'Write a short poem about disks.' }];
const askWeather = [{ role: 'user', content: 'What is the weather in Paris?' }];

// What a client acts on in a chat answer.
const choiceOf = (r) => ({
  content: r.choices[0].message.content,
  reasoning: r.choices[0].message.reasoning_content ?? null,
  tool_calls: (r.choices[0].message.tool_calls ?? []).map((t) => [t.function.name, t.function.arguments]),
  finish: r.choices[0].finish_reason,
  usage: [r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.prompt_tokens_details?.cached_tokens ?? 0],
});

async function scenario(base) {
  const client = new OpenAI({ baseURL: base + '/v1', apiKey: 'none', maxRetries: 0 });
  const chat = (body, opts) => client.chat.completions.create({ model: 'any', temperature: 0, ...body }, opts);
  const out = {};

  // Chat, then the same request streamed: one id, the role first, the same text and usage.
  // (Where two requests on one server must agree, neither reuses the prompt cache: a prompt
  // served from the cache is computed in other batch sizes, and a random model's greedy choice
  // at a near-tie can follow the last bit; llama-server's own answers differ so too.)
  const fresh = { cache_prompt: false };
  const whole = await chat({ messages: poem, max_tokens: 12, ...fresh });
  assert.equal(whole.object, 'chat.completion');
  assert.equal(whole.choices[0].message.role, 'assistant');
  out.chat = choiceOf(whole);
  const stream = await chat({ messages: poem, max_tokens: 12, ...fresh, stream: true,
                              stream_options: { include_usage: true } });
  let text = '', role = null, finish = null, usage = null;
  const ids = new Set();
  for await (const chunk of stream) {
    ids.add(chunk.id);
    if (chunk.usage) usage = chunk.usage;
    const c = chunk.choices[0];
    if (!c) continue;
    role ??= c.delta.role ?? null;
    text += c.delta.content ?? '';
    finish = c.finish_reason ?? finish;
  }
  assert.equal(ids.size, 1, 'every chunk carries the same id');
  assert.equal(role, 'assistant');
  assert.equal(text, whole.choices[0].message.content, 'streamed text equals the non-streamed text');
  assert.equal(finish, whole.choices[0].finish_reason);
  assert.equal(usage.completion_tokens, whole.usage.completion_tokens);
  out.chat_stream = { text, finish, completion_tokens: usage.completion_tokens };

  // Seeded sampling: the same draws on both servers.
  out.seeded = choiceOf(await chat({ messages: poem, max_tokens: 12, temperature: 0.9, seed: 7 }));

  // Tools: required and auto, and streamed tool-call deltas put together as a client does.
  const tools = { messages: askWeather, max_tokens: 32, tools: [weather], ...fresh };
  out.tools_required = choiceOf(await chat({ ...tools, tool_choice: 'required' }));
  out.tools_auto = choiceOf(await chat({ ...tools, tool_choice: 'auto' }));
  const toolStream = await chat({ ...tools, tool_choice: 'required', stream: true });
  const calls = [];
  let toolText = '', toolFinish = null;
  for await (const chunk of toolStream) {
    const c = chunk.choices[0];
    if (!c) continue;
    toolText += c.delta.content ?? '';
    for (const t of c.delta.tool_calls ?? []) {
      calls[t.index] ??= ['', ''];
      calls[t.index][0] += t.function?.name ?? '';
      calls[t.index][1] += t.function?.arguments ?? '';
    }
    toolFinish = c.finish_reason ?? toolFinish;
  }
  assert.equal(toolText, out.tools_required.content ?? '', 'streamed tool answer text equals the non-streamed');
  assert.deepEqual(calls, out.tools_required.tool_calls, 'streamed tool calls equal the non-streamed');
  assert.equal(toolFinish, out.tools_required.finish);
  // A conversation that already holds a call and its result: the template renders both.
  out.tool_result = choiceOf(await chat({
    max_tokens: 12,
    tools: [weather],
    messages: [...askWeather,
      { role: 'assistant', content: '', tool_calls: [{ id: 'call_1', type: 'function',
        function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: '{"temperature_c":18,"sky":"clear"}' }],
  }));

  // json_schema: the grammar holds the text to the schema, whatever the weights.
  const structured = await chat({
    messages: [{ role: 'user', content: 'Give me a person as JSON.' }],
    max_tokens: 64,
    response_format: { type: 'json_schema', json_schema: { name: 'person', strict: true, schema: person } },
  });
  out.json_schema = choiceOf(structured);
  if (structured.choices[0].finish_reason === 'stop') {
    const p = JSON.parse(structured.choices[0].message.content);
    assert.deepEqual(Object.keys(p).sort(), ['age', 'name']);
    assert.ok(Number.isInteger(p.age) && typeof p.name === 'string', structured.choices[0].message.content);
  }

  // The Responses API, then the same streamed: its deltas make the same text.
  const hello = { model: 'any', input: 'Say hello.', max_output_tokens: 12, temperature: 0, ...fresh };
  const resp = await client.responses.create(hello);
  assert.equal(resp.object, 'response');
  out.responses = { status: resp.status, text: resp.output_text, types: resp.output.map((o) => o.type),
                    usage: [resp.usage.input_tokens, resp.usage.output_tokens] };
  const rs = await client.responses.create({ ...hello, stream: true });
  let deltas = '', completed = null;
  const events = [];
  for await (const e of rs) {
    if (events.at(-1) !== e.type) events.push(e.type);
    if (e.type === 'response.output_text.delta') deltas += e.delta;
    if (e.type === 'response.completed') completed = e.response;
  }
  assert.ok(completed, `no response.completed event in ${events}`);
  assert.equal(deltas, resp.output_text, 'streamed deltas equal the non-streamed text');
  assert.equal(completed.output_text ?? deltas, deltas);
  out.responses_stream = { events, text: deltas };

  // Legacy completions.
  const comp = await client.completions.create({ model: 'any', prompt: 'Once upon a time', max_tokens: 5, temperature: 0 });
  assert.equal(comp.object, 'text_completion');
  assert.equal(comp.usage.completion_tokens, 5);
  out.completion = { text: comp.choices[0].text, finish: comp.choices[0].finish_reason };

  // Two turns: the second reuses the first's prompt from the cache.
  const turn1 = await chat({ messages: poem, max_tokens: 8 });
  const history = [...poem, turn1.choices[0].message, { role: 'user', content: 'Now make it rhyme.' }];
  const turn2 = await chat({ messages: history, max_tokens: 8 });
  const cached = turn2.usage.prompt_tokens_details?.cached_tokens ?? 0;
  assert.ok(cached >= turn1.usage.prompt_tokens, `turn 2 cached ${cached} of ${turn2.usage.prompt_tokens}`);
  out.two_turns = [choiceOf(turn1), choiceOf(turn2)];

  // Errors as the SDK's typed exceptions: a bad response format, a prompt longer than a slot.
  const refusal = async (body) => {
    try {
      await chat(body);
    } catch (e) {
      assert.ok(e instanceof OpenAI.BadRequestError, `not a BadRequestError: ${e}`);
      return [e.status, e.error?.type];
    }
    assert.fail(`accepted: ${JSON.stringify(body).slice(0, 200)}`);
  };
  out.errors = [await refusal({ messages: poem, response_format: { type: 'no-such-format' } }),
                await refusal({ messages: [{ role: 'user', content: 'word '.repeat(5000) }], max_tokens: 4 })];
  out.models = (await client.models.list()).data.length;

  // An abort, last (how far a given-up request got depends on timing, and it leaves its tokens
  // in the slot's cache): a stream given up after three chunks frees its slot. (A plain request
  // given up midway is not tried here: Node's fetch keeps the connection open when a request
  // whose answer has not begun is aborted, so no server can see that the client left. A closed
  // connection frees the slot within a second on both servers.)
  const endless = { messages: poem, max_tokens: 100000, ignore_eos: true };
  const controller = new AbortController();
  const long = await chat({ ...endless, stream: true }, { signal: controller.signal });
  let seen = 0, finishedBeforeAbort = null;
  try {
    for await (const chunk of long) {
      if (controller.signal.aborted) continue;  // already buffered
      finishedBeforeAbort = chunk.choices[0]?.finish_reason ?? finishedBeforeAbort;
      if (chunk.choices[0]?.delta?.content && ++seen === 3) controller.abort();
    }
  } catch (e) {
    // Depending on where the abort lands, the SDK ends the iteration or throws its abort error.
    assert.ok(e instanceof OpenAI.APIUserAbortError || e.name === 'AbortError', `abort: ${e}`);
  }
  assert.equal(seen, 3, 'the stream ended before it was aborted');
  assert.equal(finishedBeforeAbort, null, 'the stream finished on its own');
  assert.ok(await slotsIdle(base), 'the aborted stream still holds a slot');
  console.log(`openai_client: ${base}: tools ${JSON.stringify(out.tools_required.tool_calls)}, ` +
              `finish ${out.tools_required.finish}; json_schema ${JSON.stringify(out.json_schema.content)}; ` +
              `the aborted stream freed its slot`);
  return out;
}

await sameAsStock('openai_client', scenario);
