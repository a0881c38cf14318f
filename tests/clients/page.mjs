// The chat page of a running epq serve, in a real browser (Debian's chromium, driven headless by
// puppeteer-core): node page.mjs BASE_URL KEY OUT_DIR CHROMIUM
// Sends a message and watches the reply stream in, checks it is the text the API gives for the
// same request, stops a reply, watches the heat map change, checks that model text with markup
// is shown as text, and saves screenshots at desktop and phone widths into OUT_DIR.
// Exits non-zero with a message on the first check that fails.
import puppeteer from 'puppeteer-core';
import assert from 'node:assert/strict';

const [base, key, outDir, chromium] = process.argv.slice(2);
const browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run'],
});
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function waitFor(what, fn, ms = 60000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error('timed out waiting for ' + what);
    await sleep(50);
  }
}

try {
  const page = await browser.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  let asked = 0;
  page.on('dialog', async (d) => {
    ++asked;
    await d.accept(key);  // the page asks for the API key once, on its first 401
  });
  await page.setViewport({width: 1280, height: 800});
  await page.goto(base + '/', {waitUntil: 'load'});
  await waitFor('the health pill', () => page.$eval('#health', (e) => e.textContent === 'ready'));

  const assistantText = () => page.evaluate(() => {
    const all = document.querySelectorAll('.msg.assistant .body');
    return all.length ? all[all.length - 1].textContent : '';
  });
  const lastStats = () => page.evaluate(() => {
    const all = document.querySelectorAll('.msg.assistant .stats');
    return all.length ? all[all.length - 1].textContent : '';
  });
  const stored = () => page.evaluate(() => {
    const cs = JSON.parse(localStorage.getItem('epq.conversations'));
    const c = cs.find((x) => x.id === JSON.parse(localStorage.getItem('epq.current')));
    return c.messages[c.messages.length - 1];
  });
  const heat = () => page.$eval('#heat', (c) => c.toDataURL());
  const replies = () => page.$$eval('.msg.assistant', (a) => a.length);
  // Sends a message and waits for its reply to appear (empty at first).
  async function send(text) {
    const n = await replies();
    await page.click('#input');
    await page.keyboard.type(text);
    await page.keyboard.press('Enter');
    await waitFor('the reply to appear', async () => (await replies()) > n);
  }
  async function setField(id, value) {
    await page.$eval('#settings', (d) => (d.open = true));
    await page.$eval(id, (e, v) => {
      e.value = v;
      e.dispatchEvent(new Event('change'));
    }, String(value));
  }

  // 1. A reply streams in: the text grows over several polls before the reply ends.
  await setField('#temperature', 0);
  await setField('#max-tokens', 24);
  const heatBefore = await heat();
  const prompt = 'Tell me about the arena.';
  // Every state the reply's text takes in the page, as the page renders it: a tiny model streams
  // 24 tokens faster than any poll, so the page itself records each render.
  await page.evaluate(() => {
    window.__replyStates = [];
    new MutationObserver(() => {
      const all = document.querySelectorAll('.msg.assistant .body');
      const text = all.length ? all[all.length - 1].textContent : '';
      if (text !== window.__replyStates[window.__replyStates.length - 1]) window.__replyStates.push(text);
    }).observe(document.body, {childList: true, subtree: true, characterData: true});
  });
  await send(prompt);
  const seen = new Set();
  await waitFor('the reply to finish', async () => {
    seen.add(await assistantText());
    return (await lastStats()) !== '';
  });
  for (const t of await page.evaluate(() => window.__replyStates)) seen.add(t);
  const reply = await stored();
  assert.ok(!reply.error, 'the reply failed: ' + reply.error);
  assert.ok(reply.content.length > 0, 'the reply has text');
  assert.ok([...seen].filter((t) => t.length > 0).length >= 2, 'the text arrived in pieces, not at once');
  assert.equal(asked, 1, 'the page asked for the API key once');
  console.log(`streamed: ${reply.content.length} characters in ${seen.size} states; ${await lastStats()}`);

  // 2. The same request through the API gives the same text.
  const api = await fetch(base + '/v1/chat/completions', {
    method: 'POST',
    headers: {'Content-Type': 'application/json', Authorization: 'Bearer ' + key},
    body: JSON.stringify({messages: [{role: 'user', content: prompt}], temperature: 0, max_tokens: 24,
                          cache_prompt: false}),
  }).then((r) => r.json());
  assert.equal(reply.content, api.choices[0].message.content, 'the page shows the text the API returns');
  console.log('same text as the API');

  // 3. The heat map shows what the pager did.
  await sleep(2500);  // two polls of /pager/state
  assert.notEqual(await heat(), heatBefore, 'the heat map changed after a reply');
  const facts = await page.$eval('#pager-facts', (e) => e.textContent);
  assert.match(facts, /arena/);
  console.log('heat map changed; pager facts: ' + facts.replace(/\s+/g, ' '));
  await page.screenshot({path: outDir + '/page-desktop.png'});

  // 4. Stop: a long reply is aborted once text arrives; the page is usable again.
  await setField('#max-tokens', 2000);
  await send('Now write a very long story.');
  await waitFor('some text of the long reply', async () => (await assistantText()).length > 0);
  await page.click('#stop');
  await waitFor('the stop to land', async () => /stopped/.test(await lastStats()));
  assert.equal(await page.$eval('#send', (b) => b.disabled), false, 'send is enabled again');
  const slotsFree = await waitFor('the slot to be freed', async () => {
    const s = await fetch(base + '/slots', {headers: {Authorization: 'Bearer ' + key}}).then((r) => r.json());
    return s.every((x) => !x.is_processing);
  }, 30000);
  assert.ok(slotsFree);
  console.log('stopped: ' + (await lastStats()));

  // 5. Phone width.
  await page.$eval('#settings', (d) => (d.open = false));
  await page.setViewport({width: 390, height: 844});
  await sleep(300);
  await page.screenshot({path: outDir + '/page-phone.png', fullPage: true});

  // 6. Model text with markup is shown as text: a reply that carries a script, an image with a
  // handler and links to javascript: URLs runs nothing and links nowhere but http(s).
  await page.setViewport({width: 1280, height: 800});
  const hostile = ['Here: <script>window.__pwned = 1</script> ', '<img src=x onerror="window.__pwned = 2"> ',
                   '[click me](javascript:window.__pwned=3) [fine](https://example.com/a) ',
                   '[data](data:text/html,<script>alert(1)</script>) `<b>code</b>`'];
  await page.setRequestInterception(true);
  page.on('request', (req) => {
    if (req.method() === 'POST' && req.url().endsWith('/v1/chat/completions')) {
      const body = hostile.map((t) => 'data: ' + JSON.stringify({choices: [{index: 0, delta: {content: t}}]}) + '\n\n')
                       .join('') + 'data: ' + JSON.stringify({choices: [{index: 0, delta: {}, finish_reason: 'stop'}]}) +
                   '\n\ndata: [DONE]\n\n';
      req.respond({status: 200, contentType: 'text/event-stream', body}).catch(() => {});
    } else {
      // Once interception is off again the page's polls still come through here: nothing to do.
      req.continue().catch(() => {});
    }
  });
  await send('Say something dangerous.');
  await waitFor('the hostile reply', async () => /stop/.test(await lastStats()));
  const result = await page.evaluate(() => {
    const all = document.querySelectorAll('.msg.assistant .body');
    const body = all[all.length - 1];
    return {
      pwned: window.__pwned,
      text: body.textContent,
      scripts: body.querySelectorAll('script').length,
      images: body.querySelectorAll('img').length,
      bold: body.querySelectorAll('b').length,
      hrefs: [...body.querySelectorAll('a')].map((a) => a.getAttribute('href')),
    };
  });
  await page.setRequestInterception(false);
  assert.equal(result.pwned, undefined, 'nothing from the model ran');
  assert.equal(result.scripts, 0);
  assert.equal(result.images, 0);
  assert.equal(result.bold, 0, 'markup inside code stays text');
  assert.ok(result.text.includes('<script>window.__pwned = 1</script>'), 'the script is shown as text');
  assert.ok(result.text.includes('[click me](javascript:window.__pwned=3)'), 'the javascript: link is shown as written');
  assert.deepEqual(result.hrefs, ['https://example.com/a'], 'only the http(s) link is a link');
  console.log('hostile markup shown as text; links: ' + result.hrefs.join(' '));
  await page.screenshot({path: outDir + '/page-escaping.png'});

  assert.deepEqual(errors, [], 'the page threw');
  console.log('page: ok; screenshots in ' + outDir);
} finally {
  await browser.close();
}
