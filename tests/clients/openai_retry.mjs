// The openai package's retry on 503: node openai_retry.mjs BASE_URL, against a server with one
// slot and --queue 1. Two endless requests fill the slot and the queue; a third gets 503 with
// Retry-After. Its first 503 aborts the other two (no timing assumed), and the SDK's retry is
// then served.
import OpenAI from 'openai';
import assert from 'node:assert/strict';

const [baseURL] = process.argv.slice(2);
const endless = { model: 'any', prompt: 'Count to a hundred:', max_tokens: 100000, ignore_eos: true, stream: true };
const plain = new OpenAI({ baseURL, apiKey: 'none', maxRetries: 0 });
const controllers = [new AbortController(), new AbortController()];
const drain = async (c) => {
  try {
    for await (const _ of await plain.completions.create(endless, { signal: c.signal }));
  } catch (e) {
    if (!(e instanceof OpenAI.APIUserAbortError || e.name === 'AbortError')) throw e;
  }
};
// Waits until the server's metrics show `name value` (the server runs with --metrics).
const metricsURL = baseURL.replace(/\/v1$/, '') + '/metrics';
const until = async (name, value) => {
  for (;;) {
    const text = await (await fetch(metricsURL)).text();
    if (text.includes(`\n${name} ${value}\n`)) return;
    await new Promise((r) => setTimeout(r, 20));
  }
};
const first = drain(controllers[0]);
await until('llamacpp:requests_processing', 1);
const second = drain(controllers[1]);
await until('llamacpp:requests_deferred', 1);

const statuses = [];
const recording = async (url, init) => {
  const r = await fetch(url, init);
  statuses.push(r.status);
  if (r.status === 503) controllers.forEach((c) => c.abort());
  return r;
};
const client = new OpenAI({ baseURL, apiKey: 'none', maxRetries: 5, fetch: recording });
const third = await client.completions.create({ model: 'any', prompt: 'Hi', max_tokens: 4, ignore_eos: true });
assert.equal(third.usage.completion_tokens, 4);
assert.equal(statuses[0], 503, `the first attempt should meet a full queue, saw ${statuses}`);
assert.equal(statuses.at(-1), 200);
await Promise.all([first, second]);
console.log(`retry: statuses ${statuses.join(',')}; served after the queue drained`);
