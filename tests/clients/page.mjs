// epq serve's page at /epq/ in a real browser (Debian's chromium, driven headless by
// puppeteer-core): node page.mjs BASE_URL [STOCK_BASE_URL]
// Inside the page's frame, llama.cpp's own web UI is driven as a person would: a message typed
// and sent with Enter, the reply watched as it streams in (the UI must show the text the API
// gives for the same request),
// then a long reply stopped with the Stop button, which must free the server's slot. Beside it,
// the pager panel must follow: its facts filled and showing the server's current counters, the
// heat map drawn to the model's shape and changed by the reply, /epq/stats' misses grown. With a
// stock llama-server given, its own UI at / gets the same message and must show the same reply.
// Environment: CHROMIUM (default /usr/bin/chromium); PAGE_SHOTS, a directory for screenshots.
// The server runs with one slot; the UI's sampling is set to greedy and 24 tokens through its
// saved settings (the keys and format its settings dialog writes).
import puppeteer from 'puppeteer-core';
import assert from 'node:assert/strict';
import { servers, slotsIdle, waitFor } from './common.mjs';

const { base, stock } = servers('page.mjs');
const shots = process.env.PAGE_SHOTS;
const settings = (maxTokens) => ({ max_tokens: maxTokens, temperature: 0 });
const letters = (s) => s.replace(/[^\p{L}\p{N}]/gu, '');  // what survives markdown rendering

const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run'],
});

// Reloads the UI in `frame` and waits for its message box. The reload destroys the frame's
// document while puppeteer may still be looking into it ("Cannot find context with specified
// id"): the wait starts once the navigation is done, and starts again if a later render of the
// UI swaps its document once more.
async function reloadUi(frame) {
  await Promise.all([frame.waitForNavigation({ waitUntil: 'load' }), frame.evaluate(() => location.reload())]);
  for (let attempt = 1; ; ++attempt) {
    try {
      return await frame.waitForSelector('form.conversation-chat-form textarea');
    } catch (e) {
      const why = `${e} ${e.cause ?? ''}`;
      if (attempt >= 5 || !/context|detached|navigat/i.test(why)) throw e;
      await new Promise((r) => setTimeout(r, 250));
    }
  }
}

// Types `text` into the UI's message box and sends it with Enter. The UI may render its form
// again just after it appears (after a reload, once it has read its saved conversations), which
// takes the box away in the middle of typing: then it types again into the new one.
async function send(page, frame, text) {
  const input = 'form.conversation-chat-form textarea';
  for (let tries = 1; ; ++tries) {
    try {
      const box = await frame.waitForSelector(input);
      if (await box.evaluate((e) => e.value !== '')) {  // what a box taken away mid-typing left as a draft
        await box.evaluate((e) => e.select());
        await box.press('Backspace');
      }
      await box.type(text);
      await box.focus();
      if (await box.evaluate((e, t) => e.isConnected && e.value === t, text)) break;
    } catch (e) {
      if (tries >= 20) throw e;
    }
    if (tries >= 20) throw new Error(`the message box never kept the text typed into it: ${text}`);
    await new Promise((r) => setTimeout(r, 250));
  }
  await page.keyboard.press('Enter');
}

// Sends `text` in the UI in `frame` and waits for the reply to end; returns what the UI shows
// and what the server answers to the UI's request sent again through the API, not streamed and
// without the prompt cache (the UI's request was the server's first: computed the same way).
async function converse(page, frame, url, text) {
  let sent = null, done = false;
  const onRequest = (r) => {
    if (r.method() === 'POST' && r.url().endsWith('/v1/chat/completions')) sent = JSON.parse(r.postData());
  };
  const onFinished = (r) => {
    if (r.method() === 'POST' && r.url().endsWith('/v1/chat/completions')) done = true;
  };
  page.on('request', onRequest);
  page.on('requestfinished', onFinished);
  // Every state the reply's text takes, recorded by the page itself as it renders: a tiny model
  // can stream several tokens between two polls from here.
  await frame.evaluate(() => {
    window.__states = [];
    new MutationObserver(() => {
      const all = document.querySelectorAll('.chat-message-assistant .markdown-content');
      const t = all.length ? all[all.length - 1].textContent : '';
      if (t !== window.__states.at(-1)) window.__states.push(t);
    }).observe(document.body, { childList: true, subtree: true, characterData: true });
  });
  await send(page, frame, text);
  // (A fast server can finish the reply before a poll sees the Stop button.)
  await waitFor('the reply to start', async () => done || (await stopButton(frame)));
  await waitFor('the reply to end', async () => done && !(await stopButton(frame)), 120000);
  page.off('request', onRequest);
  page.off('requestfinished', onFinished);
  assert.ok(sent.stream, 'the UI streams');
  assert.equal(sent.max_tokens, 24, 'the UI took its saved settings');
  const api = await (await fetch(`${url}/v1/chat/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ ...sent, stream: false, cache_prompt: false }),
  })).json();
  const shown = await frame.$$eval('.chat-message-assistant .markdown-content', (all) => all.at(-1).textContent);
  const states = (await frame.evaluate(() => window.__states)).filter((t) => t.trim());
  return { api: api.choices[0].message.content, finish: api.choices[0].finish_reason, shown: shown.trim(), states };
}

// The UI's Stop button, there while a reply streams.
async function stopButton(frame) {
  for (const b of await frame.$$('form.conversation-chat-form button')) {
    if ((await b.evaluate((e) => e.querySelector('.sr-only')?.textContent)) === 'Stop') return b;
  }
  return null;
}

// Opens the UI for `url` (epq: /epq/ and the UI in its frame; stock: the UI at /), has a reply
// streamed and a long one stopped. Returns what must be the same on both servers.
async function scenario(url, epq) {
  const context = await browser.createBrowserContext();  // its own storage: a first visit
  const page = await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.evaluateOnNewDocument((s) => {
    if (!localStorage.getItem('LlamaUi.config')) {
      localStorage.setItem('LlamaUi.config', JSON.stringify(s));
      localStorage.setItem('LlamaUi.userOverrides', JSON.stringify(Object.keys(s)));
    }
  }, settings(24));
  await page.setViewport({ width: 1400, height: 900 });
  const stats = async () => (await fetch(`${url}/epq/stats`)).json();
  let frame = page.mainFrame(), before = null, heatBefore = null;
  if (epq) {
    await page.goto(url + '/epq/', { waitUntil: 'load' });
    await waitFor('the health pill', () => page.$eval('#health', (e) => e.textContent === 'ready'));
    await waitFor('the pager facts', () => page.$$eval('#pager-facts dt', (d) => d.length >= 5));
    before = await stats();
    assert.ok(before.paged, 'the server is not paged');
    const shape = await page.$eval('#heat', (c) => [c.width, c.height]);
    assert.deepEqual(shape, [before.view.n_expert, before.view.layers.length], 'the heat map has the model\'s shape');
    heatBefore = await page.$eval('#heat', (c) => c.toDataURL());
    frame = await (await page.$('#chat')).contentFrame();
  } else {
    await page.goto(url + '/', { waitUntil: 'load' });
  }

  // 1. A reply streams in and the UI shows the text the server streamed.
  const reply = await converse(page, frame, url, 'Tell me about the arena.');
  assert.ok(reply.api.length > 0, 'no text');
  // On epq's page the reply takes expert reads (a 6 MiB arena) and arrives over several frames;
  // stock answers the tiny model's 24 tokens so fast that its UI may draw them at once.
  if (epq) assert.ok(reply.states.length >= 2, `the text arrived in pieces, not at once: ${reply.states.length} states`);
  assert.equal(letters(reply.shown), letters(reply.api), `the UI shows the API's text:\n${reply.shown}\n${reply.api}`);
  console.log(`page: ${url}: reply of ${reply.api.length} characters in ${reply.states.length} states, ` +
              `finish ${reply.finish}`);

  // 2. The pager panel follows: the counters it shows are the server's, the heat map moved.
  if (epq) {
    const now = await stats();
    assert.ok(now.pager.misses > before.pager.misses, 'the reply read no experts');
    assert.ok(now.pager.tokens > before.pager.tokens);
    await waitFor('the panel to show the current counters', async () => {
      const s = await stats();
      const facts = await page.$eval('#pager-facts', (e) => e.textContent);
      return facts.includes(` in ${s.pager.misses} experts`);
    }, 10000);
    await waitFor('the heat map to change', async () => (await page.$eval('#heat', (c) => c.toDataURL())) !== heatBefore,
                  10000);
    const tps = await page.$eval('#v-tokens', (e) => e.textContent);
    assert.match(tps, /^[0-9.]+$/, 'tokens/s is shown');
    const facts = await page.$$eval('#pager-facts dt',
      (dts) => dts.map((d) => `${d.textContent}: ${d.nextElementSibling.textContent}`).join('; '));
    console.log(`page: pager facts: ${facts}; misses ${before.pager.misses} -> ${now.pager.misses}`);
    if (shots) await page.screenshot({ path: `${shots}/epq-page.png` });
  } else if (shots) {
    await page.screenshot({ path: `${shots}/stock-ui.png` });
  }

  // 3. Stop: a long reply stopped once text arrives frees the slot. (The UI keeps a stream
  // alive on the server when its page goes away; Stop must end it.)
  await frame.evaluate((s) => localStorage.setItem('LlamaUi.config', JSON.stringify(s)), settings(4000));
  await reloadUi(frame);
  const n = await frame.$$eval('.chat-message-assistant', (a) => a.length);
  await send(page, frame, 'Now write a very long story.');
  await waitFor('the long reply to show text', () => frame.$$eval('.chat-message-assistant .markdown-content',
    (all, n) => all.length > n && all.at(-1).textContent.trim().length > 0, n), 60000);
  await (await stopButton(frame)).click();
  await waitFor('the Stop button to go', async () => !(await stopButton(frame)), 10000);
  assert.ok(await slotsIdle(url), 'the stopped reply still holds a slot');
  console.log(`page: ${url}: stopped; the slot is free`);

  assert.deepEqual(errors, [], 'the page threw');
  await context.close();
  return { api: reply.api, shown: reply.shown, finish: reply.finish };
}

try {
  const got = await scenario(base, true);
  if (stock) {
    const want = await scenario(stock, false);
    assert.deepEqual(got, want, 'epq\'s page and stock\'s UI show different replies');
    console.log('page: the same reply as in stock llama-server\'s UI');
  }
  console.log('page: ok' + (shots ? `; screenshots in ${shots}` : ''));
} finally {
  await browser.close();
}
