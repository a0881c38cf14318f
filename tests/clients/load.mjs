// A bounded loopback load test: node load.mjs BASE_URL SECONDS CLIENTS
// (the server runs with --metrics). Each client sends requests back to back for SECONDS through
// the openai package: chat, completions or the Responses API, streamed or not, short or long
// prompts, and gives up on some streams midway. Every request must end as completed or aborted
// by us; anything else is a lost request. Afterwards no request may be left in the server (its
// slots idle, nothing processing or deferred), and the tokens it counts as generated must be
// those of the completed requests plus what the aborted ones generated: at least what they had
// streamed before the abort, at most their max_tokens. Prints one JSON line of counts.
import OpenAI from 'openai';
import { root, sleep, slotsIdle } from './common.mjs';

const [url, seconds = '60', clients = '16'] = process.argv.slice(2);
const base = root(url);
const client = new OpenAI({ baseURL: base + '/v1', apiKey: 'none', maxRetries: 0, timeout: 600_000 });
const ABORT_CAP = 1000;  // max_tokens of a request that will be given up

async function metrics() {
  const text = await (await fetch(`${base}/metrics`)).text();
  return (name) => Number((text.match(new RegExp(`\\n${name} (\\S+)`)) || [])[1]);
}

const counts = { sent: 0, completed: 0, aborted: 0, lost: 0, tokens: 0, aborted_tokens_seen: 0 };
const kinds = {};
const errors = [];
let seed = 12345;
const rand = (n) => ((seed = (seed * 1103515245 + 12345) % 2147483648) >>> 16) % n;  // high bits: the low ones cycle
const words = 'the disk reads experts while the model thinks about routing and caches '.split(' ');
const prompt = (n) => Array.from({ length: n }, () => words[rand(words.length)]).join(' ');

// One request: [kind, tokens generated as the server reports them] or throws.
async function request(kind, text, max_tokens, stream, signal, onToken) {
  const messages = [{ role: 'user', content: text }];
  if (kind === 'responses') {
    const body = { model: 'm', input: text, max_output_tokens: max_tokens };
    if (!stream) {
      const r = await client.responses.create(body);
      if (r.status !== 'completed' && r.status !== 'incomplete') throw new Error(`response status ${r.status}`);
      return r.usage.output_tokens;
    }
    let usage = null;
    for await (const e of await client.responses.create({ ...body, stream: true }, { signal })) {
      if (e.type === 'response.output_text.delta') onToken();
      if (e.type === 'response.completed') usage = e.response.usage;
    }
    if (!usage) throw new Error('stream ended without response.completed');
    return usage.output_tokens;
  }
  const create = kind === 'chat' ? (b, o) => client.chat.completions.create(b, o) : (b, o) => client.completions.create(b, o);
  const body = kind === 'chat' ? { model: 'm', messages, max_tokens } : { model: 'm', prompt: text, max_tokens };
  if (!stream) {
    const r = await create(body);
    if (!r.choices[0].finish_reason) throw new Error('no finish_reason');
    return r.usage.completion_tokens;
  }
  let finish = null, usage = null;
  for await (const c of await create({ ...body, stream: true, stream_options: { include_usage: true } }, { signal })) {
    if (c.usage) usage = c.usage;
    if (c.choices[0]?.finish_reason) finish = c.choices[0].finish_reason;
    if (c.choices[0]?.delta?.content || c.choices[0]?.text) onToken();
  }
  if (!finish || !usage) throw new Error('stream ended without finish_reason or usage');
  return usage.completion_tokens;
}

async function one() {
  const kind = ['chat', 'completion', 'responses'][rand(3)];
  const stream = rand(2) === 1;
  const text = prompt(rand(4) === 0 ? 300 : 8);
  const abort = stream && rand(3) === 0;
  const max_tokens = abort ? ABORT_CAP : 4 + rand(24);
  const controller = new AbortController();
  let seen = 0;
  const onToken = () => {
    if (++seen === 3 && abort) controller.abort();
  };
  const label = kind + (stream ? ' stream' : '');
  kinds[label] = (kinds[label] ?? 0) + 1;
  counts.sent++;
  try {
    const n = await request(kind, text, max_tokens, stream, controller.signal, onToken);
    if (controller.signal.aborted) throw new Error('finished although aborted');
    counts.tokens += n;
    counts.completed++;
  } catch (e) {
    if (controller.signal.aborted) {
      counts.aborted++;
      counts.aborted_tokens_seen += Math.min(seen, 3);
    } else {
      counts.lost++;
      errors.push(`${label}: ${e}`);
    }
  }
}

const before = await metrics();
const predictedBefore = before('llamacpp:tokens_predicted_total');
if (Number.isNaN(predictedBefore)) {
  console.error(`no llamacpp:tokens_predicted_total at ${base}/metrics: start the server with --metrics`);
  process.exit(2);
}
const end = Date.now() + Number(seconds) * 1000;
await Promise.all(Array.from({ length: Number(clients) }, async () => { while (Date.now() < end) await one(); }));

const idle = await slotsIdle(base, 20000);
await sleep(100);
const after = await metrics();
const predicted = after('llamacpp:tokens_predicted_total') - predictedBefore;
const result = {
  ...counts, kinds, server_predicted: predicted, slots_idle_after: idle,
  server_processing: after('llamacpp:requests_processing'), server_deferred: after('llamacpp:requests_deferred'),
  errors: errors.slice(0, 5),
};
console.log(JSON.stringify(result));
const problems = [];
if (counts.sent !== counts.completed + counts.aborted + counts.lost) problems.push('a request has no outcome');
if (counts.lost) problems.push(`${counts.lost} requests lost`);
if (!idle || result.server_processing !== 0 || result.server_deferred !== 0) problems.push('requests left in the server');
const low = counts.tokens + counts.aborted_tokens_seen, high = counts.tokens + counts.aborted * ABORT_CAP;
if (!(predicted >= low && predicted <= high)) problems.push(`the server generated ${predicted} tokens, not in [${low}, ${high}]`);
if (counts.completed === 0) problems.push('nothing completed');
if (problems.length) console.error('load: ' + problems.join('; '));
process.exit(problems.length ? 1 : 0);
