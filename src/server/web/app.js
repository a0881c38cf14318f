// epq serve's page at /epq/: llama.cpp's own web UI (in a frame) beside a live view of the
// pager from /epq/stats. Text from the server is only ever placed with textContent.
'use strict';

const $ = (id) => document.getElementById(id);
const el = (tag, cls) => {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  return e;
};

let apiKey = '';
try {
  apiKey = localStorage.getItem('epq.apiKey') || '';
} catch (e) { /* storage disabled: asked again when needed */ }

// fetch with the API key (--api-key); on 401 asks for it once and tries again.
async function api(path) {
  for (;;) {
    const res = await fetch(path, {headers: apiKey ? {Authorization: 'Bearer ' + apiKey} : {}});
    if (res.status !== 401) return res;
    const key = window.prompt('This server needs an API key (--api-key):', '');
    if (!key) throw new Error('the server needs an API key');
    apiKey = key.trim();
    try {
      localStorage.setItem('epq.apiKey', apiKey);
    } catch (e) { /* kept for this visit */ }
  }
}

// ---- server state and the pager view ---------------------------------------------------------

function bytes(n) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  for (; n >= 1024 && i < units.length - 1; ++i) n /= 1024;
  return (i ? n.toFixed(n < 10 ? 2 : 1) : String(Math.round(n))) + ' ' + units[i];
}

const series = {tokens: [], hit: [], read: [], bw: []};
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
    const res = await api('stats');
    if (!res.ok) return;
    s = await res.json();
  } catch (e) {
    return;
  }
  $('model').textContent = s.model || '';
  $('pager-state').textContent = s.paged ? '' : '(not paged: ' + (s.not_paged || '') + ')';
  const dl = $('pager-facts');
  dl.textContent = '';
  if (!s.paged) return;
  const p = s.pager;
  const v = s.view;
  fact(dl, 'arena', bytes(p.arena_bytes) + ' (' + v.resident_experts + ' of ' + v.total_experts + ' experts)');
  fact(dl, 'policy', p.policy);
  fact(dl, 'prefetch', p.prefetch.state);
  fact(dl, 'layout', p.repacked_matrices_per_expert > 0 ? 'repacked (as stock)' : 'file layout (-nr)');
  fact(dl, 'read', bytes(p.bytes_read) + ' in ' + p.misses + ' experts');
  $('arena-why').textContent = s.arena_reasoning || '';
  const c = {tokens: p.tokens, hits: p.hits, lookups: p.expert_lookups, bytes_read: p.bytes_read,
             read_seconds: p.read_seconds, t: performance.now() / 1000};
  if (last) {
    const d = (k) => c[k] - last[k];
    const dt = d('t');
    push('tokens', dt > 0 && d('tokens') > 0 ? d('tokens') / dt : null);
    push('hit', d('lookups') > 0 ? d('hits') / d('lookups') : null);
    push('read', d('tokens') > 0 ? d('bytes_read') / d('tokens') : null);
    push('bw', d('read_seconds') > 0 ? d('bytes_read') / d('read_seconds') : null);
  }
  last = c;
  const lastOf = (name) => {
    const vals = series[name].filter((x) => x !== null);
    return vals.length ? vals[vals.length - 1] : null;
  };
  const show = (id, x, f) => ($(id).textContent = x === null ? '-' : f(x));
  show('v-tokens', lastOf('tokens'), (x) => x.toFixed(2));
  show('v-hit', lastOf('hit'), (x) => (100 * x).toFixed(1) + '%');
  show('v-read', lastOf('read'), bytes);
  show('v-bw', lastOf('bw'), (x) => bytes(x) + '/s');
  drawSeries($('c-tokens'), series.tokens, 0, '#2f5fd0');
  drawSeries($('c-hit'), series.hit, 1, '#f0a030');
  drawSeries($('c-read'), series.read, 0, '#d63a3a');
  drawSeries($('c-bw'), series.bw, 0, '#5b7fd6');
  if (v.cells && v.cells.length) drawHeat(v);
}

async function pollHealth() {
  try {
    const res = await fetch('../health');
    const ok = res.ok;
    $('health').textContent = ok ? 'ready' : 'loading';
    $('health').className = 'pill ' + (ok ? 'ok' : '');
  } catch (e) {
    $('health').textContent = 'offline';
    $('health').className = 'pill bad';
  }
}

$('toggle-pager').addEventListener('click', () => document.body.classList.toggle('hide-pager'));
pollHealth();
setInterval(pollHealth, 5000);
pollPager();
setInterval(pollPager, 1000);
