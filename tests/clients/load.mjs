// A bounded loopback load test: node load.mjs BASE_URL SECONDS CLIENTS
// Each client sends requests back to back for SECONDS: chat or completions, streamed or not,
// short or long prompts, and aborts some streams midway. Every request must end as completed,
// aborted by us, or refused with 503; anything else is a lost request. The server's own counters
// must agree, and no slot may stay busy afterwards. Prints one JSON line of counts.
import OpenAI from 'openai';

const [baseURL, seconds = '60', clients = '16'] = process.argv.slice(2);
const root = baseURL.replace(/\/v1$/, '');
const client = new OpenAI({ baseURL, apiKey: 'none', maxRetries: 0, timeout: 600_000 });
const end = Date.now() + Number(seconds) * 1000;
const counts = { sent: 0, completed: 0, aborted: 0, refused: 0, lost: 0, tokens: 0 };
const errors = [];
let seed = 12345;
const rand = (n) => ((seed = (seed * 1103515245 + 12345) % 2147483648) >>> 16) % n;  // high bits: the low ones cycle
const words = 'the disk reads experts while the model thinks about routing and caches '.split(' ');
const prompt = (n) => Array.from({ length: n }, () => words[rand(words.length)]).join(' ');

async function one() {
  const kind = rand(4);  // 0 chat, 1 chat stream, 2 completion, 3 completion stream (some aborted)
  const long = rand(4) === 0;
  const text = prompt(long ? 300 : 8);
  const max_tokens = 4 + rand(24);
  const abort = (kind === 1 || kind === 3) && rand(3) === 0;
  const controller = new AbortController();
  counts.sent++;
  try {
    if (kind === 0 || kind === 2) {
      const r = kind === 0
        ? await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: text }], max_tokens })
        : await client.completions.create({ model: 'm', prompt: text, max_tokens });
      if (!r.choices[0].finish_reason) throw new Error('no finish_reason');
      counts.tokens += r.usage.completion_tokens;
      counts.completed++;
      return;
    }
    const body = kind === 1
      ? { model: 'm', messages: [{ role: 'user', content: text }], max_tokens: abort ? 1000 : max_tokens, stream: true }
      : { model: 'm', prompt: text, max_tokens: abort ? 1000 : max_tokens, stream: true };
    const stream = kind === 1
      ? await client.chat.completions.create(body, { signal: controller.signal })
      : await client.completions.create(body, { signal: controller.signal });
    let chunks = 0, finish = null;
    for await (const c of stream) {
      if (c.choices[0]?.finish_reason) finish = c.choices[0].finish_reason;
      if (++chunks === 3 && abort) controller.abort();
    }
    if (abort && controller.signal.aborted) { counts.aborted++; return; }
    if (!finish) throw new Error('stream ended without finish_reason');
    counts.tokens += chunks;
    counts.completed++;
  } catch (e) {
    if (controller.signal.aborted) counts.aborted++;
    else if (e.status === 503) counts.refused++;
    else { counts.lost++; errors.push(String(e)); }
  }
}

await Promise.all(Array.from({ length: Number(clients) }, async () => { while (Date.now() < end) await one(); }));

let busy = true;
for (let i = 0; i < 200 && busy; ++i) {
  busy = (await (await fetch(`${root}/slots`)).json()).some((s) => s.is_processing);
  if (busy) await new Promise((r) => setTimeout(r, 50));
}
const metrics = await (await fetch(`${root}/metrics`)).text();
const metric = (name) => Number((metrics.match(new RegExp(`\\n${name} (\\S+)`)) || [])[1]);
const accepted = metric('epq:requests_total');
const result = { ...counts, server_accepted: accepted, server_cancelled: metric('epq:requests_cancelled_total'),
                 slots_busy_after: busy, errors: errors.slice(0, 5) };
console.log(JSON.stringify(result));
const ok = counts.lost === 0 && !busy && accepted === counts.completed + counts.aborted;
process.exit(ok ? 0 : 1);
