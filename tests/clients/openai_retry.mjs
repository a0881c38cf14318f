// The openai package's retry on 503: node openai_retry.mjs BASE_URL, against a server with one
// slot and --queue 1. Two requests fill slot and queue; a third gets 503 with Retry-After and the
// SDK retries it until it is served.
import OpenAI from 'openai';
import assert from 'node:assert/strict';

const [baseURL] = process.argv.slice(2);
const statuses = [];
const recording = async (url, init) => {
  const r = await fetch(url, init);
  statuses.push(r.status);
  return r;
};
const client = new OpenAI({ baseURL, apiKey: 'none', maxRetries: 10, fetch: recording });
const body = (n) => ({ model: 'any', prompt: 'Count to a hundred:', max_tokens: n, ignore_eos: true, temperature: 0 });
const plain = new OpenAI({ baseURL, apiKey: 'none', maxRetries: 0 });
const first = plain.completions.create(body(1500));
await new Promise((r) => setTimeout(r, 300));
const second = plain.completions.create(body(8));
await new Promise((r) => setTimeout(r, 300));
const third = await client.completions.create(body(4));
assert.equal(third.usage.completion_tokens, 4);
assert.ok(statuses.includes(503), `expected a 503 before success, saw ${statuses}`);
assert.equal(statuses.at(-1), 200);
await Promise.all([first, second]);
console.log(`retry: statuses ${statuses.join(',')}; served after the queue drained`);
