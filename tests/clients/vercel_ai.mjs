// The Vercel AI SDK (`ai` with `@ai-sdk/openai-compatible`) against a running server:
//   node vercel_ai.mjs BASE_URL [STOCK_BASE_URL]
// generateText with a tool the model is required to call, the same through streamText (the
// same text, calls and finish reason), a conversation that holds a call and its result, and a
// plain streamText whose pieces make its text. The
// server needs a chat template with tools (Qwen3's). A random-weight model rarely writes a
// well-formed tool call, and stock then returns text too: what counts is the same answer.
// Exits non-zero with a message on the first check that fails.
import { generateText, jsonSchema, streamText, tool } from 'ai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import assert from 'node:assert/strict';
import { sameAsStock } from './common.mjs';

async function scenario(base) {
  const llama = createOpenAICompatible({ name: 'llama', baseURL: base + '/v1', apiKey: 'none', includeUsage: true });
  const model = llama.chatModel('any');
  const executed = [];
  const tools = {
    get_weather: tool({
      description: 'The weather in a city',
      inputSchema: jsonSchema({ type: 'object', properties: { city: { type: 'string' } }, required: ['city'] }),
      execute: async ({ city }) => {
        executed.push(city);
        return { city, temperature_c: 18 };
      },
    }),
  };
  // Greedy, and no request reuses the prompt cache where two must agree (see openai_client.mjs).
  const common = { model, temperature: 0, seed: 1, maxRetries: 0, providerOptions: { llama: { cache_prompt: false } } };
  const ask = { ...common, prompt: 'What is the weather in Paris?', tools, toolChoice: 'required', maxOutputTokens: 32 };
  // What a client acts on: text, calls, results, why it stopped, what it cost.
  const resultOf = async (r) => ({
    text: await r.text,
    calls: (await r.toolCalls).map((c) => [c.toolName, c.input]),
    results: (await r.toolResults).map((c) => [c.toolName, c.output]),
    finish: await r.finishReason,
    usage: [(await r.usage).inputTokens, (await r.usage).outputTokens],
  });
  const out = {};

  // A random model writes text where a call is required (llama.cpp's grammar lets content come
  // before a call), and the SDK then throws its ToolChoiceViolationError: the same on stock.
  const violation = (e) => {
    assert.equal(e?.name, 'AI_ToolChoiceViolationError', `unexpected: ${e?.stack ?? e}`);
    return { violation: e.finishReason, text: e.content.map((c) => c.text ?? `[${c.type}]`).join('') };
  };
  out.generate = await generateText(ask).then(resultOf, violation);
  if (!out.generate.violation) {
    assert.equal(out.generate.results.length, out.generate.calls.length, 'every call was executed');
  }

  const streamed = streamText(ask);
  let pieces = '';
  try {
    for await (const t of streamed.textStream) pieces += t;
    out.stream = await resultOf(streamed);
    assert.equal(pieces, out.stream.text);
  } catch (e) {
    out.stream = violation(e);
  }
  // (streamText does not throw the violation: it ends with the text and the finish reason.)
  const gist = (r) => ({ text: r.text, calls: r.calls ?? [], finish: r.finish ?? r.violation });
  assert.deepEqual(gist(out.stream), gist(out.generate), 'streamText gives what generateText gives');

  // A conversation that already holds a call and its result, in the SDK's own message form:
  // the SDK turns both into OpenAI messages and the template renders them (the same prompt
  // tokens as on stock).
  const history = [
    { role: 'user', content: 'What is the weather in Paris?' },
    { role: 'assistant', content: [{ type: 'tool-call', toolCallId: 'call_1', toolName: 'get_weather',
                                     input: { city: 'Paris' } }] },
    { role: 'tool', content: [{ type: 'tool-result', toolCallId: 'call_1', toolName: 'get_weather',
                                output: { type: 'json', value: { temperature_c: 18, sky: 'clear' } } }] },
  ];
  out.after_result = await resultOf(await generateText({ ...common, messages: history, tools, maxOutputTokens: 12 }));

  const story = streamText({ ...common, prompt: 'Tell me a story about a disk.', maxOutputTokens: 16 });
  const parts = [];
  for await (const t of story.textStream) parts.push(t);
  out.story = await resultOf(story);
  assert.ok(parts.length > 1, 'the text came in pieces');
  assert.equal(parts.join(''), out.story.text);
  assert.equal(out.story.usage[1], 16);
  out.executed = executed;
  console.log(`vercel_ai: ${base}: required tool call: ${JSON.stringify(out.generate).slice(0, 160)}; ` +
              `story in ${parts.length} pieces`);
  return out;
}

await sameAsStock('vercel_ai', scenario);
