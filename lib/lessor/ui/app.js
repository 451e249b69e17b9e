// lessor's dashboard: plain DOM, no framework, no other origin.  Every datum
// comes from the admin API with the token kept in sessionStorage; text is
// only ever set with textContent.
'use strict';

const TOKEN_KEY = 'lessor.admin_token';
const LIST_PERIOD_MS = 1000;
const RUN_PERIOD_MS = 500;
const LOG_TAIL_BYTES = 256 * 1024;
const STATS_RUNS = 1000;

const $ = (id) => document.getElementById(id);
let timer = null;
let generation = 0; // bumped on every navigation: late answers are dropped

class HttpError extends Error {
  constructor(status, code, message) {
    super(message || code || ('HTTP ' + status));
    this.status = status;
    this.code = code;
  }
}

function token() { return sessionStorage.getItem(TOKEN_KEY); }

async function api(method, path, wantText) {
  const headers = {};
  const t = token();
  if (t) headers.Authorization = 'Bearer ' + t;
  const resp = await fetch(path, { method, headers, cache: 'no-store' });
  if (!resp.ok) {
    let code = '', message = '';
    try { const j = await resp.json(); code = j.error; message = j.message; } catch (e) { /* no body */ }
    throw new HttpError(resp.status, code, message);
  }
  return wantText ? resp.text() : resp.json();
}

// ---- little DOM helpers ----

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function row(cells) {
  const tr = el('tr');
  for (const c of cells) tr.appendChild(c instanceof Node ? c : el('td', c));
  return tr;
}

function statusCell(status) {
  const td = el('td', null, 'status');
  td.appendChild(el('span', status, 's-' + status));
  return td;
}

function fill(tbody, rows) {
  tbody.replaceChildren(...rows);
}

function dash(v) { return v === null || v === undefined || v === '' ? '-' : v; }

function age(iso) {
  if (!iso) return '-';
  const s = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
  if (s < 60) return s + 's';
  if (s < 3600) return Math.floor(s / 60) + 'm ' + (s % 60) + 's';
  if (s < 86400) return Math.floor(s / 3600) + 'h ' + Math.floor((s % 3600) / 60) + 'm';
  return Math.floor(s / 86400) + 'd ' + Math.floor((s % 86400) / 3600) + 'h';
}

function time(iso) { return iso ? iso.replace('T', ' ').replace('Z', '') : '-'; }

// Why a run ended the way it did: "exit 3", "crash SIGSEGV", "timeout".
function why(run) {
  if (!run.reason) return run.outcome || '-';
  if (run.reason === 'exit' && run.exit_code !== null && run.exit_code !== undefined)
    return run.exit_code === 0 ? run.outcome : 'exit ' + run.exit_code;
  if (run.reason === 'crash' && run.signal) return 'crash ' + run.signal;
  return run.reason;
}

function showError(err) {
  const p = $('error');
  if (!err) { p.hidden = true; return; }
  p.textContent = err.message || String(err);
  p.hidden = false;
}

function stamp() { $('updated').textContent = 'updated ' + new Date().toLocaleTimeString(); }

// ---- views ----

async function renderRuns(gen) {
  const q = new URLSearchParams({ limit: '200' });
  const st = $('f-status').value, wf = $('f-workflow').value.trim(), wk = $('f-worker').value.trim();
  if (st) q.set('status', st);
  if (wf) q.set('workflow', wf);
  const j = await api('GET', '/v1/runs?' + q);
  if (gen !== generation) return;
  const runs = j.runs.filter((r) => !wk || (r.worker_id || '').includes(wk));
  fill($('runs').tBodies[0], runs.map((r) => {
    const id = el('td');
    const a = el('a', r.id);
    a.href = '#/run/' + encodeURIComponent(r.id);
    id.appendChild(a);
    const tr = row([id, statusCell(r.status), r.workflow, dash(r.worker_id),
      r.attempt + '/' + r.max_attempts,
      why(r) + (r.cancel_requested && r.status === 'running' ? ' (cancel requested)' : ''),
      el('td', age(r.created_at), 'num')]);
    tr.dataset.id = r.id;
    tr.className = 'clickable';
    tr.addEventListener('click', (ev) => { if (ev.target.tagName !== 'A') location.hash = a.hash; });
    return tr;
  }));
  $('runs-count').textContent = runs.length + ' shown';
}

function field(dl, name, value) {
  dl.appendChild(el('dt', name));
  dl.appendChild(el('dd', dash(value)));
}

function pretty(v) { return v === null || v === undefined ? '-' : JSON.stringify(v, null, 2); }

let logFollow = true;
let logCache = { id: null, len: -1, text: '' };

async function renderRun(gen, id) {
  const path = '/v1/runs/' + encodeURIComponent(id);
  const run = await api('GET', path);
  if (gen !== generation) return;
  // the log again only when it grew (the API has no range read: the whole log)
  if (logCache.id !== id || logCache.len !== run.log_length) {
    const text = await api('GET', path + '/log', true);
    if (gen !== generation) return;
    logCache = { id, len: run.log_length, text };
  }
  const log = logCache.text;
  $('r-id').textContent = run.id;
  const badge = $('r-status');
  badge.textContent = run.status;
  badge.className = 'badge s-' + run.status;
  $('r-cancel-requested').hidden = !(run.cancel_requested && run.status === 'running');
  const done = ['succeeded', 'failed', 'cancelled'].includes(run.status);
  $('r-cancel').disabled = done || (run.cancel_requested && run.status === 'running');
  $('r-requeue').disabled = run.status !== 'running';
  const dl = $('r-fields');
  dl.replaceChildren();
  field(dl, 'workflow', run.workflow);
  field(dl, 'attempt', run.attempt + ' of ' + run.max_attempts + ' (' + run.attempts_used + ' used)');
  field(dl, 'worker', run.lease ? run.lease.worker_id : null);
  field(dl, 'tags', (run.tags || []).join(', '));
  field(dl, 'outcome', why(run));
  field(dl, 'error', run.error);
  field(dl, 'timeout', run.timeout_s ? run.timeout_s + ' s' : null);
  field(dl, 'duration', run.duration_ms !== null && run.duration_ms !== undefined ? (run.duration_ms / 1000).toFixed(1) + ' s' : null);
  field(dl, 'created', time(run.created_at) + ' (' + age(run.created_at) + ' ago)');
  field(dl, 'started', time(run.started_at));
  field(dl, 'finished', time(run.finished_at));
  field(dl, 'lease expires', time(run.lease_expires_at));
  field(dl, 'lease expiries', run.lease_expiries);
  field(dl, 'rejected writes', run.rejected_writes);
  $('r-input').textContent = pretty(run.input);
  $('r-output').textContent = pretty(run.output);
  fill($('r-leases').tBodies[0], (run.leases || []).map((l) => row([
    String(l.attempt), dash(l.worker_id), dash(l.claim_id), l.ttl_s + ' s', time(l.granted_at),
    time(l.last_renewed_at), l.ended_at ? time(l.ended_at) : 'held', dash(l.end_reason),
    el('td', dash(l.detail), 'wrap')])));
  const pre = $('r-log');
  const tail = log.length > LOG_TAIL_BYTES ? log.slice(log.length - LOG_TAIL_BYTES) : log;
  if (pre.textContent !== tail) {
    pre.textContent = tail;
    if (logFollow) pre.scrollTop = pre.scrollHeight;
  }
  $('r-loglen').textContent = run.log_length + ' bytes' +
    (log.length > LOG_TAIL_BYTES ? ', showing the last ' + LOG_TAIL_BYTES : '') +
    (done ? '' : ', following');
  return done;
}

async function renderWorkers(gen) {
  const j = await api('GET', '/v1/workers');
  if (gen !== generation) return;
  fill($('workers').tBodies[0], j.workers.map((w) => row([
    w.worker_id, time(w.last_claim_at) + ' (' + age(w.last_claim_at) + ' ago)',
    w.workflows === null ? 'any' : w.workflows.join(', ') || 'none',
    (w.tags || []).join(', ') || '-', el('td', w.max_runs, 'num'), el('td', w.runs_held, 'num'),
    el('td', w.runs_granted, 'num'), el('td', w.claims, 'num')])));
}

const STATUSES = ['pending', 'running', 'succeeded', 'failed', 'cancelled'];

async function renderStats(gen) {
  const [s, j] = await Promise.all([api('GET', '/v1/stats'), api('GET', '/v1/runs?limit=' + STATS_RUNS)]);
  if (gen !== generation) return;
  $('stat-cards').replaceChildren(...STATUSES.concat(['total', 'parked_requests']).map((k) => {
    const d = el('div', k.replace('_', ' '), k === 'total' || k === 'parked_requests' ? '' : 'card-' + k);
    d.prepend(el('b', s[k] ?? 0));
    return d;
  }));
  const by = new Map();
  for (const r of j.runs) {
    if (!by.has(r.workflow)) by.set(r.workflow, Object.fromEntries(STATUSES.map((x) => [x, 0])));
    by.get(r.workflow)[r.status]++;
  }
  fill($('stats-wf').tBodies[0], [...by.keys()].sort().map((wf) => {
    const c = by.get(wf);
    return row([wf, ...STATUSES.map((x) => el('td', c[x], 'num')),
      el('td', STATUSES.reduce((n, x) => n + c[x], 0), 'num')]);
  }));
  $('stats-note').textContent = j.runs.length >= STATS_RUNS
    ? '(the newest ' + STATS_RUNS + ' runs)' : '(all ' + j.runs.length + ' runs)';
}

// ---- routing and refresh ----

function route() {
  const h = location.hash.replace(/^#\/?/, '');
  const m = h.match(/^run\/(.+)$/);
  if (m) return { view: 'run', id: decodeURIComponent(m[1]) };
  if (h === 'workers' || h === 'stats') return { view: h };
  return { view: 'runs' };
}

function show(view) {
  for (const s of document.querySelectorAll('main > section')) s.hidden = s.id !== 'view-' + view;
  for (const a of document.querySelectorAll('header nav a'))
    a.classList.toggle('active', a.dataset.view === view || (view === 'run' && a.dataset.view === 'runs'));
  $('logout').hidden = view === 'login' || !token();
}

async function refresh() {
  clearTimeout(timer);
  const gen = generation;
  const r = route();
  let period = LIST_PERIOD_MS, done = false;
  try {
    if (r.view === 'run') { done = await renderRun(gen, r.id); period = RUN_PERIOD_MS; }
    else if (r.view === 'workers') await renderWorkers(gen);
    else if (r.view === 'stats') await renderStats(gen);
    else await renderRuns(gen);
    if (gen !== generation) return;
    showError(null);
    stamp();
  } catch (err) {
    if (gen !== generation) return;
    if (err.status === 401) return needLogin('The token was refused (401): sign in again.');
    if (err.status === 403) return needLogin('That is not the admin token (403).');
    showError(err);
  }
  // a finished run's page does not change any more, except by our own buttons
  if ($('live').checked && !done) timer = setTimeout(refresh, period);
}

function navigate() {
  generation++;
  logFollow = true;
  show(route().view);
  refresh();
}

function needLogin(message) {
  generation++;
  clearTimeout(timer);
  sessionStorage.removeItem(TOKEN_KEY);
  show('login');
  $('login-error').textContent = message || '';
  $('token').focus();
}

async function login(ev) {
  ev.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $('token').value.trim());
  try {
    await api('GET', '/v1/stats');
  } catch (err) {
    return needLogin(err.status === 401 ? 'Wrong token.' : err.status === 403
      ? 'That is a worker token; the dashboard needs the admin token.' : err.message);
  }
  $('token').value = '';
  navigate();
}

async function action(verb) {
  const id = route().id;
  if (!confirm(verb[0].toUpperCase() + verb.slice(1) + ' run ' + id + '?')) return;
  try {
    await api('POST', '/v1/runs/' + encodeURIComponent(id) + '/' + verb);
    showError(null);
  } catch (err) {
    showError(err);
  }
  refresh();
}

async function start() {
  $('login-form').addEventListener('submit', login);
  $('logout').addEventListener('click', () => needLogin('Token forgotten.'));
  $('r-cancel').addEventListener('click', () => action('cancel'));
  $('r-requeue').addEventListener('click', () => action('requeue'));
  $('live').addEventListener('change', () => { generation++; refresh(); });
  for (const id of ['f-status', 'f-workflow', 'f-worker'])
    $(id).addEventListener(id === 'f-status' ? 'change' : 'input', () => { generation++; refresh(); });
  $('r-log').addEventListener('scroll', (ev) => {
    const p = ev.target;
    logFollow = p.scrollTop + p.clientHeight >= p.scrollHeight - 4;
  });
  window.addEventListener('hashchange', navigate);
  if (!token()) {
    // a server without token files answers without one
    try { await api('GET', '/v1/stats'); } catch (err) { return needLogin(''); }
  }
  navigate();
}

start();
