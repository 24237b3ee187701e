// The terminal page: xterm.js attached to a sandboxd terminal over a WebSocket, reconnecting from
// the last byte it rendered, and a file panel on the files API, kept current by the directory
// watch. The token (when sandboxd wants one) comes from the page's URL fragment, #token=...,
// which browsers never send to a server; #id=N attaches to process N instead of a new shell.
import { Terminal } from './xterm.mjs';
import { FitAddon } from './addon-fit.mjs';

const params = new URLSearchParams(location.hash.slice(1));
const token = params.get('token') || '';
const auth = token ? { Authorization: 'Bearer ' + token } : {};
const status = document.getElementById('status');

const term = new Terminal({ cursorBlink: true, scrollback: 5000, fontFamily: 'monospace' });
const fit = new FitAddon();
term.loadAddon(fit);
term.open(document.getElementById('terminal'));
fit.fit();

// What the page knows of its terminal: the process, and the offset of the next byte it expects.
const state = { id: params.get('id') ? Number(params.get('id')) : null, offset: null,
                received: 0, ws: null, exited: null, retry: 250 };
const encoder = new TextEncoder();

function remember() {
  const p = new URLSearchParams(location.hash.slice(1));
  p.set('id', String(state.id));
  history.replaceState(null, '', '#' + p.toString());
}

function url() {
  const scheme = location.protocol === 'https:' ? 'wss:' : 'ws:';
  const q = new URLSearchParams();
  if (token) q.set('token', token);
  let path;
  if (state.id === null) {
    path = '/v1/terminal';
    q.set('cols', term.cols);
    q.set('rows', term.rows);
  } else {
    path = `/v1/processes/${state.id}/terminal`;
    if (state.offset !== null) q.set('offset', state.offset);
  }
  return `${scheme}//${location.host}${path}?${q}`;
}

function control(msg) {
  switch (msg.type) {
  case 'attached':
    state.id = msg.id;
    // Resuming: the bytes from msg.offset on follow; a fresh attach replays from there.
    state.offset = msg.offset;
    remember();
    status.textContent = `process ${msg.id}`;
    sendResize();
    break;
  case 'truncated':
    term.write(`\r\n\x1b[33m[${msg.to - msg.from} bytes of output were lost]\x1b[0m\r\n`);
    state.offset = msg.to;
    break;
  case 'exit':
    state.exited = msg;
    status.textContent = `process ${state.id} exited (${msg.reason}` +
      (msg.signal ? `, signal ${msg.signal})` : `, code ${msg.exit_code})`);
    break;
  case 'error':
    status.textContent = `error: ${msg.message}`;
    break;
  }
}

function connect() {
  const ws = new WebSocket(url());
  ws.binaryType = 'arraybuffer';
  state.ws = ws;
  ws.onopen = () => { state.retry = 250; };
  ws.onmessage = (ev) => {
    if (typeof ev.data === 'string') {
      control(JSON.parse(ev.data));
      return;
    }
    const bytes = new Uint8Array(ev.data);
    term.write(bytes);
    state.offset += bytes.length;
    state.received += bytes.length;
  };
  ws.onclose = (ev) => {
    if (state.ws !== ws) return;
    state.ws = null;
    if (state.exited || ev.code === 1008) return;
    if (ev.code === 1006 && state.id === null) {
      status.textContent = 'could not open a terminal';
      return;
    }
    status.textContent = `disconnected; reconnecting…`;
    setTimeout(connect, state.retry);
    state.retry = Math.min(state.retry * 2, 5000);
  };
}

function sendResize() {
  if (state.ws && state.ws.readyState === WebSocket.OPEN)
    state.ws.send(JSON.stringify({ type: 'resize', cols: term.cols, rows: term.rows }));
}

term.onData((s) => {
  if (state.ws && state.ws.readyState === WebSocket.OPEN) state.ws.send(encoder.encode(s));
});
term.onResize(sendResize);
window.addEventListener('resize', () => fit.fit());
connect();

// For tests and curious users: the screen as text, and a dropped connection on demand.
window.sbx = {
  term, state,
  screen() {
    const b = term.buffer.active, lines = [];
    for (let i = 0; i < b.length; i++) lines.push(b.getLine(i).translateToString(true));
    return lines.join('\n');
  },
  drop() { if (state.ws) state.ws.close(); },
  watch: 'starting', // 'live' while the directory watch streams, 'polling' without it
};

// ---- files ------------------------------------------------------------------------------

let cwd = '/';
const entries = document.getElementById('entries');
const filesStatus = document.getElementById('files-status');

function enc(path) {
  return path.split('/').map(encodeURIComponent).join('/');
}

async function list() {
  const r = await fetch('/v1/files' + enc(cwd), { headers: auth });
  if (!r.ok) {
    filesStatus.textContent = `listing ${cwd}: ${r.status}`;
    return;
  }
  const listing = await r.json();
  document.getElementById('cwd').textContent = cwd;
  entries.replaceChildren();
  if (cwd !== '/') entries.append(item({ name: '..', type: 'directory' }));
  for (const e of listing.entries) entries.append(item(e));
  filesStatus.textContent = `${listing.entries.length} entries`;
}

function item(e) {
  const li = document.createElement('li');
  li.className = e.type;
  li.dataset.name = e.name;
  const name = document.createElement('span');
  name.className = 'name';
  name.textContent = e.name;
  li.append(name);
  if (e.type === 'file') {
    const size = document.createElement('span');
    size.className = 'size';
    size.textContent = e.size;
    li.append(size);
  }
  li.onclick = () => (e.type === 'directory' ? enter(e.name) : download(e.name));
  return li;
}

function enter(name) {
  cwd = name === '..' ? cwd.replace(/[^/]+\/$/, '') : cwd + name + '/';
  list();
  watch();
}

async function download(name) {
  const r = await fetch('/v1/files' + enc(cwd + name), { headers: auth });
  if (!r.ok) {
    filesStatus.textContent = `download ${name}: ${r.status}`;
    return;
  }
  const a = document.createElement('a');
  a.href = URL.createObjectURL(await r.blob());
  a.download = name;
  a.click();
  URL.revokeObjectURL(a.href);
}

document.getElementById('upload').onchange = async (ev) => {
  for (const f of ev.target.files) {
    const r = await fetch('/v1/files' + enc(cwd + f.name), { method: 'PUT', headers: auth, body: f });
    filesStatus.textContent = r.ok ? `uploaded ${f.name}` : `upload ${f.name}: ${r.status}`;
  }
  ev.target.value = '';
  list();
};

// The watch (Server-Sent Events) read through fetch, which can send the token as a header; any
// event re-lists the directory (coalesced). Without the watch route, a poll every 5 s.
let watching = null;
let relist = null;
async function watch() {
  if (watching) watching.abort();
  const ctl = new AbortController();
  watching = ctl;
  try {
    const r = await fetch('/v1/watch' + enc(cwd), { headers: auth, signal: ctl.signal });
    if (!r.ok) throw new Error(String(r.status));
    window.sbx.watch = 'live';
    const reader = r.body.getReader();
    for (;;) {
      const { done } = await reader.read();
      if (done) break;
      clearTimeout(relist);
      relist = setTimeout(list, 100);
    }
  } catch (e) {
    if (ctl.signal.aborted) return;
  }
  window.sbx.watch = 'polling';
  if (watching === ctl) setTimeout(() => { if (watching === ctl) { list(); watch(); } }, 5000);
}

list();
watch();
