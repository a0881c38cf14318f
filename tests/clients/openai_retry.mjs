// The openai package's retry against a server that is still loading its model:
//   node openai_retry.mjs SERVER_COMMAND...
// (the command without --port, e.g. `epq serve -m FILE --host 127.0.0.1 -t 2`). The script
// starts the server on a free port itself: llama-server answers HTTP before its model is loaded,
// with 503 "Loading model" for everything but /health's status and the web UI. As soon as that
// 503 is seen, a chat request goes out through the SDK; it must meet the 503, retry on its own
// and be served once the model is ready. Then the server must exit 0 on SIGTERM.
import OpenAI from 'openai';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { sleep } from './common.mjs';

const command = process.argv.slice(2);
if (!command.length) {
  console.error('usage: node openai_retry.mjs SERVER_COMMAND...');
  process.exit(2);
}
// A port free now (the server is told to use it; nothing else here takes ports meanwhile).
const port = await new Promise((resolve) => {
  const s = createServer().listen(0, '127.0.0.1', () => {
    const p = s.address().port;
    s.close(() => resolve(p));
  });
});
const base = `http://127.0.0.1:${port}`;
const server = spawn(command[0], [...command.slice(1), '--port', String(port)], { stdio: ['ignore', 'ignore', 'pipe'] });
let log = '';
server.stderr.on('data', (d) => (log += d));
const exited = new Promise((resolve) => server.on('exit', (code, signal) => resolve(code ?? 128 + (signal === 'SIGTERM' ? 15 : 9))));
// A script stopped from outside (a test's timeout) takes its server with it.
for (const sig of ['SIGTERM', 'SIGINT']) {
  process.on(sig, () => {
    server.kill('SIGKILL');
    process.exit(1);
  });
}

try {
  // The first HTTP answer, polled as fast as the server starts listening.
  let first = null;
  for (let i = 0; i < 3000 && !first && server.exitCode === null; ++i) {
    first = await fetch(`${base}/v1/models`).then(async (r) => [r.status, await r.text()], () => null);
    if (!first) await sleep(10);
  }
  assert.ok(first, 'the server never answered:\n' + log);
  assert.equal(first[0], 503, `the first answer came after the model was loaded (${first}): nothing to retry`);
  assert.equal(JSON.parse(first[1]).error.type, 'unavailable_error');

  const statuses = [];
  const recording = async (url, init) => {
    const r = await fetch(url, init);
    statuses.push(r.status);
    return r;
  };
  const client = new OpenAI({ baseURL: base + '/v1', apiKey: 'none', maxRetries: 8, fetch: recording });
  const t0 = Date.now();
  const r = await client.chat.completions.create({
    model: 'any', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 4, ignore_eos: true, temperature: 0,
  });
  assert.equal(r.usage.completion_tokens, 4);
  assert.equal(statuses[0], 503, `the first attempt should meet the loading server, saw ${statuses}`);
  assert.deepEqual(statuses.slice(0, -1).filter((s) => s !== 503), [], `only 503s before the answer: ${statuses}`);
  assert.equal(statuses.at(-1), 200);
  console.log(`retry: statuses ${statuses.join(',')}; served ${Date.now() - t0} ms after the first 503`);
} finally {
  server.kill('SIGTERM');
}
const code = await exited;
assert.equal(code, 0, 'the server did not exit 0 on SIGTERM:\n' + log.slice(-2000));
