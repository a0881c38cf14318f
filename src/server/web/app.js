// The chat page of epq serve: conversations kept in this browser, replies streamed from the
// server's own /v1/chat/completions, and a live view of the pager from /pager/state.
// Model text is only ever placed with textContent (see renderMarkdown): never as HTML.
'use strict';

const $ = (id) => document.getElementById(id);
const el = (tag, cls) => {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  return e;
};
const store = {
  get(key, fallback) {
    try {
      const v = localStorage.getItem('epq.' + key);
      return v === null ? fallback : JSON.parse(v);
    } catch (e) {
      return fallback;
    }
  },
  set(key, value) {
    try {
      localStorage.setItem('epq.' + key, JSON.stringify(value));
    } catch (e) { /* storage full or disabled: the page still works for this visit */ }
  },
};

let apiKey = store.get('apiKey', '');
let conversations = store.get('conversations', []);
let currentId = store.get('current', null);
let controller = null;  // the reply being streamed

function headers() {
  const h = {'Content-Type': 'application/json'};
  if (apiKey) h.Authorization = 'Bearer ' + apiKey;
  return h;
}

// fetch with the API key; on 401 asks for the key once and tries again.
async function api(path, opts = {}) {
  for (;;) {
    const res = await fetch(path, Object.assign({}, opts, {headers: headers()}));
    if (res.status !== 401) return res;
    const key = window.prompt('This server needs an API key (--api-key):', '');
    if (!key) throw new Error('the server needs an API key');
    apiKey = key.trim();
    store.set('apiKey', apiKey);
  }
}

// ---- markdown, safely: text nodes only; links only to http(s) -------------------------------

function inline(text, into) {
  const re = /(`[^`\n]+`)|(\*\*[^*\n]+\*\*)|(\*[^*\n]+\*)|(\[([^\]\n]+)\]\(([^)\s]+)\))/g;
  let last = 0;
  let m;
  while ((m = re.exec(text)) !== null) {
    if (m.index > last) into.appendChild(document.createTextNode(text.slice(last, m.index)));
    if (m[1]) {
      const c = el('code');
      c.textContent = m[1].slice(1, -1);
      into.appendChild(c);
    } else if (m[2]) {
      const b = el('strong');
      b.textContent = m[2].slice(2, -2);
      into.appendChild(b);
    } else if (m[3]) {
      const i = el('em');
      i.textContent = m[3].slice(1, -1);
      into.appendChild(i);
    } else if (/^https?:\/\//i.test(m[6])) {
      const a = el('a');
      a.href = m[6];
      a.textContent = m[5];
      a.rel = 'noopener noreferrer';
      a.target = '_blank';
      into.appendChild(a);
    } else {
      into.appendChild(document.createTextNode(m[0]));  // javascript:, data:, ...: shown as written
    }
    last = re.lastIndex;
  }
  if (last < text.length) into.appendChild(document.createTextNode(text.slice(last)));
}

function renderMarkdown(text, into) {
  into.textContent = '';
  const lines = text.split('\n');
  const isFence = (l) => /^\s*```/.test(l);
  const isHeading = (l) => /^#{1,6}\s/.test(l);
  const isItem = (l) => /^\s*([-*]|\d+\.)\s+/.test(l);
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (isFence(line)) {
      const body = [];
      for (++i; i < lines.length && !isFence(lines[i]); ++i) body.push(lines[i]);
      ++i;
      const pre = el('pre');
      const code = el('code');
      code.textContent = body.join('\n');
      pre.appendChild(code);
      into.appendChild(pre);
    } else if (isHeading(line)) {
      const level = line.match(/^#+/)[0].length;
      const h = el('h' + Math.min(6, level + 2));
      inline(line.replace(/^#+\s/, ''), h);
      into.appendChild(h);
      ++i;
    } else if (isItem(line)) {
      const list = el(/^\s*\d/.test(line) ? 'ol' : 'ul');
      for (; i < lines.length && isItem(lines[i]); ++i) {
        const li = el('li');
        inline(lines[i].replace(/^\s*([-*]|\d+\.)\s+/, ''), li);
        list.appendChild(li);
      }
      into.appendChild(list);
    } else if (line.trim() === '') {
      ++i;
    } else {
      const para = [];
      for (; i < lines.length && lines[i].trim() !== '' && !isFence(lines[i]) && !isHeading(lines[i]) &&
             !isItem(lines[i]);
           ++i) {
        para.push(lines[i]);
      }
      const p = el('p');
      inline(para.join('\n'), p);
      into.appendChild(p);
    }
  }
}
window.renderMarkdown = renderMarkdown;  // for the page's tests

// ---- conversations ---------------------------------------------------------------------------

function save() {
  store.set('conversations', conversations);
  store.set('current', currentId);
}

function current() {
  let c = conversations.find((x) => x.id === currentId);
  if (!c) {
    c = {id: Date.now().toString(36) + Math.random().toString(36).slice(2, 6), title: 'New chat', messages: []};
    conversations.unshift(c);
    currentId = c.id;
    save();
  }
  return c;
}

function renderList() {
  const ul = $('conversations');
  ul.textContent = '';
  for (const c of conversations) {
    const li = el('li', c.id === currentId ? 'active' : '');
    const title = el('span');
    title.textContent = c.title;
    const del = el('button');
    del.textContent = '\u2715';
    del.title = 'Delete';
    del.addEventListener('click', (e) => {
      e.stopPropagation();
      conversations = conversations.filter((x) => x.id !== c.id);
      if (currentId === c.id) currentId = conversations.length ? conversations[0].id : null;
      save();
      renderAll();
    });
    li.append(title, del);
    li.addEventListener('click', () => {
      if (controller) return;
      currentId = c.id;
      save();
      renderAll();
    });
    ul.appendChild(li);
  }
}

function addMessage(m) {
  const div = el('div', 'msg ' + m.role + (m.error ? ' error' : ''));
  const role = el('div', 'role');
  role.textContent = m.role;
  const body = el('div', 'body');
  renderMarkdown(m.error ? m.content + (m.content ? '\n\n' : '') + 'Error: ' + m.error : m.content, body);
  const stats = el('div', 'stats');
  stats.textContent = m.stats || '';
  div.append(role, body, stats);
  $('messages').appendChild(div);
  return {div, body, stats};
}

function renderAll() {
  renderList();
  $('messages').textContent = '';
  for (const m of current().messages) addMessage(m);
  scrollDown();
}

// The newest text in view: the message list scrolls on a wide screen, the page on a phone.
function scrollDown() {
  const m = $('messages');
  m.scrollTop = m.scrollHeight;
  if (window.innerWidth <= 820) $('composer').scrollIntoView({block: 'end'});
}

function setBusy(busy) {
  $('send').disabled = busy;
  $('stop').disabled = !busy;
}

// ---- a reply, streamed -----------------------------------------------------------------------

async function send(text) {
  const conv = current();
  conv.messages.push({role: 'user', content: text});
  if (conv.title === 'New chat') conv.title = text.slice(0, 48);
  const messages = [];
  const system = $('system').value.trim();
  if (system) messages.push({role: 'system', content: system});
  for (const m of conv.messages) {
    if (!m.error) messages.push({role: m.role, content: m.content});
  }
  const reply = {role: 'assistant', content: ''};
  conv.messages.push(reply);
  save();
  renderAll();
  const view = $('messages').lastChild;
  const body = view.querySelector('.body');
  controller = new AbortController();
  setBusy(true);
  const t0 = performance.now();
  let chunks = 0;
  try {
    const res = await api('/v1/chat/completions', {
      method: 'POST',
      signal: controller.signal,
      body: JSON.stringify({
        messages,
        stream: true,
        stream_options: {include_usage: true},
        temperature: Number($('temperature').value),
        max_tokens: Number($('max-tokens').value),
      }),
    });
    if (!res.ok) {
      const j = await res.json().catch(() => ({}));
      throw new Error((j.error && j.error.message) || res.status + ' ' + res.statusText);
    }
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buf = '';
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buf += decoder.decode(value, {stream: true});
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl).trim();
        buf = buf.slice(nl + 1);
        if (!line.startsWith('data:')) continue;
        const data = line.slice(5).trim();
        if (data === '[DONE]') continue;
        const ev = JSON.parse(data);
        if (ev.error) throw new Error(ev.error.message || 'the server ended the reply');
        const choice = ev.choices && ev.choices[0];
        if (choice && choice.delta && choice.delta.content) {
          reply.content += choice.delta.content;
          ++chunks;
          renderMarkdown(reply.content, body);
          scrollDown();
        }
        if (choice && choice.finish_reason) reply.finish = choice.finish_reason;
        if (ev.usage) reply.usage = ev.usage;
      }
    }
  } catch (e) {
    if (e.name === 'AbortError') {
      reply.finish = 'stopped';
    } else {
      reply.error = String(e.message || e);
      view.classList.add('error');
      renderMarkdown(reply.content + (reply.content ? '\n\n' : '') + 'Error: ' + reply.error, body);
    }
  } finally {
    const s = (performance.now() - t0) / 1000;
    const n = reply.usage ? reply.usage.completion_tokens : chunks;
    reply.stats = n + ' tokens in ' + s.toFixed(1) + ' s' + (reply.finish ? ' (' + reply.finish + ')' : '');
    view.querySelector('.stats').textContent = reply.stats;
    controller = null;
    setBusy(false);
    save();
  }
}

$('composer').addEventListener('submit', (e) => {
  e.preventDefault();
  const text = $('input').value.trim();
  if (!text || controller) return;
  $('input').value = '';
  send(text);
});
$('input').addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey) {
    e.preventDefault();
    $('composer').requestSubmit();
  }
});
$('stop').addEventListener('click', () => controller && controller.abort());
$('new-chat').addEventListener('click', () => {
  if (controller) return;
  currentId = null;
  current();
  renderAll();
});
$('forget-key').addEventListener('click', () => {
  apiKey = '';
  store.set('apiKey', '');
});
for (const [id, key] of [['system', 'system'], ['temperature', 'temperature'], ['max-tokens', 'maxTokens']]) {
  const v = store.get(key, null);
  if (v !== null) $(id).value = v;
  $(id).addEventListener('change', () => store.set(key, $(id).value));
}
$('toggle-list').addEventListener('click', () => {
  document.body.classList.toggle(window.innerWidth <= 820 ? 'show-list' : 'hide-list');
});
$('toggle-pager').addEventListener('click', () => document.body.classList.toggle('hide-pager'));

// ---- server state and the pager view ---------------------------------------------------------

function bytes(n) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  for (; n >= 1024 && i < units.length - 1; ++i) n /= 1024;
  return (i ? n.toFixed(n < 10 ? 2 : 1) : String(Math.round(n))) + ' ' + units[i];
}

const series = {decode: [], prefill: [], hit: [], read: [], bw: []};
const SERIES_LEN = 120;
let last = null;

function push(name, v) {
  const s = series[name];
  s.push(v);
  if (s.length > SERIES_LEN) s.shift();
}

function drawSeries(canvas, values, maxHint, color) {
  const ctx = canvas.getContext('2d');
  const w = canvas.width;
  const h = canvas.height;
  ctx.clearRect(0, 0, w, h);
  let max = maxHint || 0;
  for (const v of values) if (v !== null && v > max) max = v;
  if (max <= 0) return;
  ctx.strokeStyle = color;
  ctx.lineWidth = 1.5;
  ctx.beginPath();
  let pen = false;
  // Newest on the right, so the chart scrolls left as polls come in.
  const offset = SERIES_LEN - values.length;
  values.forEach((v, i) => {
    const x = ((offset + i) / (SERIES_LEN - 1)) * w;
    if (v === null) {
      pen = false;
      return;
    }
    const y = h - 2 - (v / max) * (h - 4);
    if (pen) ctx.lineTo(x, y);
    else ctx.moveTo(x, y);
    pen = true;
  });
  ctx.stroke();
}

function drawFloor(canvas, values, floor) {
  if (!(floor > 0)) return;
  let max = floor;
  for (const v of values) if (v !== null && v > max) max = v;
  const ctx = canvas.getContext('2d');
  const y = canvas.height - 2 - (floor / max) * (canvas.height - 4);
  ctx.strokeStyle = '#8a93a6';
  ctx.setLineDash([4, 3]);
  ctx.beginPath();
  ctx.moveTo(0, y);
  ctx.lineTo(canvas.width, y);
  ctx.stroke();
  ctx.setLineDash([]);
}

const HEAT_COLORS = ['#dfe3ea', '#5b7fd6', '#f0a030', '#d63a3a'];

function drawHeat(heat) {
  const canvas = $('heat');
  const rows = heat.cells.length;
  const cols = heat.n_expert;
  if (!rows || !cols) return;
  canvas.width = cols;
  canvas.height = rows;
  canvas.style.height = Math.max(60, Math.min(320, rows * 5)) + 'px';
  const ctx = canvas.getContext('2d');
  const img = ctx.createImageData(cols, rows);
  const rgb = HEAT_COLORS.map((c) => [1, 3, 5].map((k) => parseInt(c.slice(k, k + 2), 16)));
  heat.cells.forEach((row, y) => {
    for (let x = 0; x < cols; ++x) {
      const c = rgb[Number(row[x]) || 0];
      const o = (y * cols + x) * 4;
      img.data[o] = c[0];
      img.data[o + 1] = c[1];
      img.data[o + 2] = c[2];
      img.data[o + 3] = 255;
    }
  });
  ctx.putImageData(img, 0, 0);
}

function fact(dl, name, value) {
  const dt = el('dt');
  dt.textContent = name;
  const dd = el('dd');
  dd.textContent = value;
  dl.append(dt, dd);
}

async function pollPager() {
  if (document.hidden || document.body.classList.contains('hide-pager')) return;
  let s;
  try {
    const res = await api('/pager/state');
    if (!res.ok) return;
    s = await res.json();
  } catch (e) {
    return;
  }
  const c = s.counters;
  $('pager-state').textContent = s.paged ? '' : '(off: --no-pager)';
  const dl = $('pager-facts');
  dl.textContent = '';
  if (s.paged) {
    fact(dl, 'arena', bytes(s.arena_bytes) + ' (' + s.resident_experts + ' of ' + s.total_experts + ' experts)');
    fact(dl, 'policy', s.policy);
    fact(dl, 'prefetch', s.prefetch);
    fact(dl, 'layout', s.repacked ? 'repacked (as stock)' : 'file layout (-nr)');
  }
  if (last) {
    const d = (k) => c[k] - last[k];
    const dDecode = d('tokens_predicted_seconds_total');
    const dPrompt = d('prompt_seconds_total');
    push('decode', dDecode > 0 ? d('tokens_predicted_total') / dDecode : null);
    push('prefill', dPrompt > 0 ? d('prompt_tokens_total') / dPrompt : null);
    const lookups = d('hits') + d('misses');
    push('hit', lookups > 0 ? d('hits') / lookups : null);
    const tokens = d('tokens_predicted_total') + d('prompt_tokens_total');
    push('read', tokens > 0 ? d('bytes_read') / tokens : null);
    const readS = d('read_seconds');
    push('bw', readS > 0 ? d('bytes_read') / readS : null);
  }
  last = c;
  const lastOf = (name) => {
    const v = series[name].filter((x) => x !== null);
    return v.length ? v[v.length - 1] : null;
  };
  const show = (id, v, f) => ($(id).textContent = v === null ? '-' : f(v));
  show('v-decode', lastOf('decode'), (v) => v.toFixed(2));
  show('v-prefill', lastOf('prefill'), (v) => v.toFixed(1));
  show('v-hit', lastOf('hit'), (v) => (100 * v).toFixed(1) + '%');
  show('v-read', lastOf('read'), bytes);
  show('v-bw', lastOf('bw'), (v) => bytes(v) + '/s');
  $('v-floor').textContent = s.read_floor_bytes_per_second > 0 ? 'disk floor ' + bytes(s.read_floor_bytes_per_second) + '/s (dashed)' : '';
  drawSeries($('c-decode'), series.decode, 0, '#2f5fd0');
  drawSeries($('c-prefill'), series.prefill, 0, '#2e7d4f');
  drawSeries($('c-hit'), series.hit, 1, '#f0a030');
  drawSeries($('c-read'), series.read, 0, '#d63a3a');
  drawSeries($('c-bw'), series.bw, s.read_floor_bytes_per_second, '#5b7fd6');
  drawFloor($('c-bw'), series.bw, s.read_floor_bytes_per_second);
  if (s.heat) drawHeat(s.heat);
}

async function pollHealth() {
  try {
    const res = await fetch('/health');
    const ok = res.ok;
    $('health').textContent = ok ? 'ready' : 'loading';
    $('health').className = 'pill ' + (ok ? 'ok' : '');
  } catch (e) {
    $('health').textContent = 'offline';
    $('health').className = 'pill bad';
  }
}

(async function start() {
  renderAll();
  pollHealth();
  setInterval(pollHealth, 5000);
  try {
    const res = await fetch('/v1/models');
    const j = await res.json();
    if (j.data && j.data[0]) $('model').textContent = j.data[0].id;
  } catch (e) { /* shown as offline by the health poll */ }
  pollPager();
  setInterval(pollPager, 1000);
})();
