// ghostless pages: live updates over SSE, and the buttons. No framework, no build step.
//
// The server renders every panel; this script only decides when to fetch a fresh one
// (on each SSE event, and every few seconds on the dashboard for what no stream carries),
// so the words on the page are written once, in the templates.
'use strict';

const csrf = () => (document.querySelector('meta[name="csrf-token"]') || {}).content || '';

// Text from events and errors without bidi controls (web/friendly.py BIDI_CONTROLS says why).
const BIDI = /[\u202A-\u202E\u2066-\u2069\u200E\u200F\u061C]/g;
const plain = (text) => String(text).replace(BIDI, '');

// -- times: the server writes UTC; show the reader's local time -----------------------------------
function localize(root) {
  const today = new Date().toDateString();
  for (const t of root.querySelectorAll('time[datetime]')) {
    const d = new Date(t.getAttribute('datetime'));
    if (isNaN(d)) continue;
    t.textContent = d.toDateString() === today ? d.toLocaleTimeString() : d.toLocaleString();
    t.title = d.toString();
  }
}

// -- the "live" dot in the header ------------------------------------------------------------------
let openStreams = 0;
function setLive(delta) {
  openStreams = Math.max(0, openStreams + delta);
  const dot = document.getElementById('live-dot');
  if (!dot) return;
  dot.classList.toggle('on', openStreams > 0);
  dot.textContent = openStreams > 0 ? 'live' : (dot.dataset.idle || 'offline');
}

const KINDS = ['snapshot', 'ready', 'transition', 'stage', 'progress', 'stale', 'breaker', 'overdue', 'escalated'];

// An EventSource whose events (of every kind) go to onEvent(kind, data); it reconnects by
// itself with Last-Event-ID. An answer other than a 200 event stream closes an EventSource for
// good: then a new one opens after REOPEN_MS (plus as much again at random, so that pages
// refused at once do not come back at once), resuming with ?last_event_id=. close() ends it.
const REOPEN_MS = 3000;
function stream(url, onEvent) {
  let es = null, up = false, ended = false, timer = null, lastId = '';
  const open = () => {
    const sep = url.includes('?') ? '&' : '?';
    es = new EventSource(lastId ? `${url}${sep}last_event_id=${encodeURIComponent(lastId)}` : url);
    es.onopen = () => { if (!up) { up = true; setLive(+1); } };
    es.onerror = () => {
      if (up) { up = false; setLive(-1); }
      if (es.readyState === EventSource.CLOSED && !ended && !timer) {
        timer = setTimeout(() => { timer = null; if (!ended) open(); }, REOPEN_MS * (1 + Math.random()));
      }
    };
    for (const kind of KINDS) {
      es.addEventListener(kind, (m) => {
        if (m.lastEventId) lastId = m.lastEventId;
        let data = {}; try { data = JSON.parse(m.data); } catch (e) { /* keep {} */ }
        onEvent(kind, data);
      });
    }
  };
  open();
  return { close() { ended = true; clearTimeout(timer); es.close(); if (up) { up = false; setLive(-1); } } };
}

// Re-renders el from el.dataset.src: soon() coalesces bursts, at most one fetch in flight.
function refresher(el, after) {
  let busy = false, again = false, timer = null;
  async function now() {
    if (busy) { again = true; return; }
    busy = true;
    try {
      const r = await fetch(el.dataset.src, { credentials: 'same-origin', headers: { Accept: 'text/html' } });
      if (r.status === 401) { location.href = '/login?next=' + encodeURIComponent(location.pathname); return; }
      if (r.ok) { el.innerHTML = await r.text(); localize(el); if (after) after(); }
    } catch (e) { /* offline: the next event or poll tries again */ }
    finally { busy = false; if (again) { again = false; now(); } }
  }
  return { now, soon() { if (!timer) timer = setTimeout(() => { timer = null; now(); }, 120); } };
}

// -- buttons and forms with data-post: a JSON POST with the session's CSRF token ------------------
function flash(text, bad) {
  const box = document.getElementById('flash');
  if (!box) return;
  box.textContent = plain(text);
  box.className = 'flash' + (bad ? ' bad' : '');
  box.hidden = false;
  clearTimeout(flash.timer);
  flash.timer = setTimeout(() => { box.hidden = true; }, 5000);
}

function bodyOf(el) {
  if (el.tagName !== 'FORM') return {};
  const field = el.dataset.jsonField;
  if (field) return { [field]: JSON.parse(el.elements[field].value) };  // throws on bad JSON
  return Object.fromEntries(new FormData(el).entries());
}

async function post(el) {
  if (el.dataset.confirm && !window.confirm(el.dataset.confirm)) return;
  let body;
  try { body = bodyOf(el); } catch (e) { flash('That is not valid JSON: ' + e.message, true); return; }
  const button = el.tagName === 'FORM' ? el.querySelector('button') : el;
  if (button) button.disabled = true;
  try {
    const r = await fetch(el.dataset.post, {
      method: 'POST', credentials: 'same-origin', body: JSON.stringify(body),
      headers: { 'Content-Type': 'application/json', Accept: 'application/json', 'X-CSRF-Token': csrf() },
    });
    const data = await r.json().catch(() => ({}));
    if (!r.ok) { flash((data.error && data.error.message) || ('Failed: HTTP ' + r.status), true); return; }
    if (r.status === 201 && data.task) { location.href = '/tasks/' + encodeURIComponent(data.task.id); return; }
    flash(data.retried !== undefined ? `Retried ${data.retried} task(s).` : 'Done.');
    document.dispatchEvent(new Event('ghostless:changed'));
  } catch (e) {
    flash('Network error: ' + e.message, true);
  } finally {
    if (button) button.disabled = false;
  }
}

document.addEventListener('click', (e) => {
  const el = e.target.closest('button[data-post]');
  if (el) { e.preventDefault(); post(el); }
});
document.addEventListener('submit', (e) => {
  if (e.target.matches('form[data-post]')) { e.preventDefault(); post(e.target); }
});

// -- the dashboard ---------------------------------------------------------------------------------
function eventText(ev) {  // says what web/dashboard.py event_text says
  switch (ev.kind) {
    case 'transition': return `${ev.from || 'new'} → ${ev.to}` + (ev.reason ? `: ${ev.reason}` : '');
    case 'stage': return `stage ${ev.stage || ''}`;
    case 'progress': return `progress ${Math.round((ev.progress || 0) * 100)}% ${ev.message || ''}`.trim();
    case 'stale': return `refused a stale ${ev.verb || 'call'} from ${ev.worker || 'a worker'}`;
    case 'breaker': return `breaker ${ev.upstream || ''} ${ev.state || ''}`;
    default: return ev.kind;
  }
}

function feedLine(ev) {
  const li = document.createElement('li');
  li.className = 'new kind-' + ev.kind;
  const t = document.createElement('time');
  t.setAttribute('datetime', new Date(ev.at * 1000).toISOString());
  const a = document.createElement('a');
  a.className = 'mono';
  a.href = '/tasks/' + encodeURIComponent(ev.task_id);
  a.textContent = ev.task_id;
  const span = document.createElement('span');
  span.textContent = plain(eventText(ev));
  li.append(t, ' ', a, ' ', span);
  localize(li);
  return li;
}

function dashboard() {
  const live = document.getElementById('live');
  const feed = document.getElementById('feed');
  const panel = refresher(live);
  stream(feed.dataset.stream, (kind, ev) => {
    if (kind === 'ready') return;
    feed.querySelector('.empty')?.remove();
    feed.prepend(feedLine(ev));
    while (feed.children.length > 50) feed.lastElementChild.remove();
    panel.soon();
  });
  setInterval(panel.now, 5000);  // workers, breakers, other users' counts: no stream carries them
  document.addEventListener('ghostless:changed', panel.now);
}

// -- the task list: status and progress of the rows shown --------------------------------------------
function taskList() {
  const table = document.getElementById('task-table');
  if (!table) return;
  stream('/api/events', (kind, ev) => {
    const row = table.querySelector(`tr[data-task="${CSS.escape(ev.task_id || '')}"]`);
    if (!row) return;
    if (kind === 'transition') {
      const badge = row.querySelector('.status .badge');
      badge.textContent = ev.to;
      badge.className = 'badge st-' + ev.to.toLowerCase().replace('_', '-');
      row.querySelector('.stage').textContent = plain(ev.reason || '-');
    } else if (kind === 'progress' || kind === 'stage') {
      row.querySelector('.stage').textContent = plain(kind === 'stage' ? ev.stage
        : `${Math.round((ev.progress || 0) * 100)}% ${ev.message || ''}`);
    }
  });
}

// -- the task page: status panel and timeline follow the task's own stream ---------------------------
function taskPage() {
  const panel = document.getElementById('panel');
  let es = null;
  const terminal = () => (panel.querySelector('[data-terminal]') || panel).dataset.terminal === 'true';
  const follow = () => {
    const edit = document.getElementById('edit');
    if (edit) edit.hidden = terminal();
    const dot = document.getElementById('live-dot');
    if (dot) dot.dataset.idle = terminal() ? 'ended' : '';  // nothing more will change: not "offline"
    if (terminal() && es) { es.close(); es = null; }
    setLive(0);
    if (!terminal() && !es) es = stream(panel.dataset.stream, onEvent);
  };
  const view = refresher(panel, follow);
  function onEvent(kind, ev) {
    if (kind === 'progress') {  // move the bar at once; the words follow with the panel
      const bar = document.getElementById('progress');
      if (bar) bar.value = ev.progress || 0;
      const pct = panel.querySelector('.pct');
      if (pct) pct.textContent = Math.round((ev.progress || 0) * 100) + '%';
    }
    const shown = (panel.querySelector('[data-version]') || {}).dataset;
    // A snapshot is news only when the task changed between the page's render and the stream's start.
    if (kind !== 'snapshot' || !shown || String(ev.task && ev.task.version) !== shown.version) view.soon();
  }
  document.addEventListener('ghostless:changed', view.now);
  follow();
}

document.addEventListener('DOMContentLoaded', () => {
  localize(document);
  const page = document.body.dataset.page;
  if (page === 'dashboard') dashboard();
  else if (page === 'tasks') taskList();
  else if (page === 'task') taskPage();
});
