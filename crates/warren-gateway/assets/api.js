// Warren dashboard: the API client, the token, the SSE reader and a DOM helper.
// The token lives in this tab's sessionStorage and travels only in the Authorization header:
// never in a URL, never in a cookie. Every error shows what the API said.

const KEY = 'warren.token';

export const token = {
  get: () => sessionStorage.getItem(KEY),
  set: (t) => sessionStorage.setItem(KEY, t),
  clear: () => sessionStorage.removeItem(KEY),
};

/** An error answered by the API: its HTTP status, `error` code and `message`, as sent. */
export class ApiError extends Error {
  constructor(status, body, text) {
    const code = body && typeof body.error === 'string' ? body.error : `http_${status}`;
    const message = body && typeof body.message === 'string' ? body.message : (text || `HTTP ${status}`);
    super(message);
    this.status = status;
    this.code = code;
    this.body = body;
  }
  /** The line shown to the operator: status, code and the API's own message. */
  get shown() {
    let s = `${this.status} ${this.code}: ${this.message}`;
    if (this.body && Array.isArray(this.body.problems)) {
      for (const p of this.body.problems) s += `\n- ${p.key ? p.key + ': ' : ''}${p.message}${p.hint ? ' (' + p.hint + ')' : ''}`;
    }
    return s;
  }
}

/** Called when the API says the token is not (or no longer) valid. */
let onUnauthorized = () => {};
export function setUnauthorizedHandler(f) { onUnauthorized = f; }

function headers(accept, withBody) {
  const h = { Accept: accept };
  const t = token.get();
  if (t) h.Authorization = `Bearer ${t}`;
  if (withBody) h['Content-Type'] = 'application/json';
  return h;
}

async function failure(res) {
  const text = await res.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch { body = null; }
  const err = new ApiError(res.status, body, text);
  if (res.status === 401) onUnauthorized(err);
  return err;
}

/** One JSON request; resolves to the parsed body, rejects with an ApiError. */
export async function api(method, path, body, signal) {
  const res = await fetch(path, {
    method,
    headers: headers('application/json', body !== undefined),
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: 'omit',
    cache: 'no-store',
    signal,
  });
  if (!res.ok) throw await failure(res);
  const text = await res.text();
  return text ? JSON.parse(text) : null;
}

/** A server-sent-event stream over fetch (EventSource cannot send a bearer header):
 *  calls onOpen() once the server accepted it, then onEvent(name, data) per event until the
 *  stream ends or `signal` aborts. */
export async function stream(method, path, body, onEvent, signal, onOpen) {
  const res = await fetch(path, {
    method,
    headers: headers('text/event-stream', body !== undefined),
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: 'omit',
    cache: 'no-store',
    signal,
  });
  if (!res.ok) throw await failure(res);
  if (onOpen) onOpen();
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += value.replace(/\r\n/g, '\n');
    let end;
    while ((end = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, end);
      buf = buf.slice(end + 2);
      let name = 'message';
      const data = [];
      for (const line of block.split('\n')) {
        if (line.startsWith('event:')) name = line.slice(6).trim();
        else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
      }
      if (data.length === 0) continue; // a keep-alive comment
      let parsed;
      try { parsed = JSON.parse(data.join('\n')); } catch { parsed = data.join('\n'); }
      onEvent(name, parsed);
    }
  }
}

/** True for the rejection of a request this page cancelled (navigation away). */
export const aborted = (e) => e && e.name === 'AbortError';

/** Builds an element: h('button', {type: 'button', onclick: f}, 'Text', child...).
 *  Text is always a text node: nothing from the API is parsed as HTML. */
export function h(tag, attrs, ...children) {
  const svg = tag.startsWith('svg:');
  const el = svg ? document.createElementNS('http://www.w3.org/2000/svg', tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'text') el.textContent = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

/** The error box: what the API said, in an alert region. */
export function errorBox(e) {
  const text = e instanceof ApiError ? e.shown : `${e && e.message ? e.message : e}`;
  return h('pre', { class: 'error', role: 'alert' }, text);
}

/** Shows `e` in `slot` (replacing its content); AbortErrors are ignored. */
export function showError(slot, e) {
  if (aborted(e)) return;
  slot.replaceChildren(errorBox(e));
}

/** A labelled form field: h('label') around its text and the control. */
export function field(label, control) {
  return h('label', { class: 'field' }, h('span', {}, label), control);
}

/** A table from rows and [header, cell(row)] columns. */
export function table(caption, columns, rows) {
  return h('div', { class: 'scroll' }, h('table', {},
    h('caption', {}, caption),
    h('thead', {}, h('tr', {}, columns.map(([name]) => h('th', { scope: 'col' }, name)))),
    h('tbody', {}, rows.length === 0
      ? h('tr', {}, h('td', { colspan: columns.length, class: 'muted' }, 'none'))
      : rows.map((r) => h('tr', {}, columns.map(([, cell]) => h('td', {}, cell(r))))))));
}

export const fmtTime = (t) => (t ? new Date(typeof t === 'number' ? t * 1000 : t).toLocaleString() : '');
export const usd = (n) => `$${(n || 0).toFixed(4)}`;
export const enc = encodeURIComponent;
