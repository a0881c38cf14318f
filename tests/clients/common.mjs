// What the client scripts share. Each script runs one scenario against the server it is given
// and, when a second server is given (stock llama-server on the same file with the same flags),
// runs the same scenario there and requires the same answers: the same requests in the same
// order leave both servers' slots and prompt caches in the same state, so greedy and seeded
// sampling give the same text. What a scenario records for that comparison is what a client
// sees and acts on (text, tool calls, finish reasons, token counts), never ids or timings.
import assert from 'node:assert/strict';

// "http://host:port", from a URL given with or without a trailing "/" or "/v1".
export const root = (url) => url.replace(/\/+$/, '').replace(/\/v1$/, '');

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The servers named on the command line: node SCRIPT BASE_URL [STOCK_BASE_URL].
export function servers(script) {
  const [base, stock] = process.argv.slice(2);
  if (!base) {
    console.error(`usage: node ${script} BASE_URL [STOCK_BASE_URL]`);
    process.exit(2);
  }
  return { base: root(base), stock: stock ? root(stock) : null };
}

// Polls `fn` until it returns something truthy, for at most `ms`.
export async function waitFor(what, fn, ms = 30000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error('timed out waiting for ' + what);
    await sleep(50);
  }
}

// Whether every slot is idle within `ms` (an aborted request must give its slot back).
export async function slotsIdle(base, ms = 10000) {
  try {
    await waitFor('idle slots', async () => {
      const slots = await (await fetch(`${base}/slots`)).json();
      return slots.every((s) => !s.is_processing);
    }, ms);
    return true;
  } catch {
    return false;
  }
}

// Runs `scenario(base)` (which returns a record of what matters) on the server, then on stock
// if one was given, and requires the same record, key by key, so that a failure names the
// request whose answer differs.
export async function sameAsStock(name, scenario) {
  const { base, stock } = servers(name + '.mjs');
  const t0 = Date.now();
  const got = await scenario(base);
  console.log(`${name}: ${base} done in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  if (!stock) return got;
  const t1 = Date.now();
  const want = await scenario(stock);
  console.log(`${name}: stock ${stock} done in ${((Date.now() - t1) / 1000).toFixed(1)} s`);
  for (const key of new Set([...Object.keys(want), ...Object.keys(got)])) {
    assert.deepEqual(got[key], want[key], `${key}: the server and stock llama-server answer differently`);
  }
  console.log(`${name}: the same ${Object.keys(want).length} answers as stock llama-server`);
  return got;
}
