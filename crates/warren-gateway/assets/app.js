// Warren dashboard: login, navigation and the page router. Pages live in pages.js; adding
// one is an entry in PAGES there. Routes are URL fragments (#/chat/main): they never carry
// the token.

import { api, token, h, field, showError, aborted, setUnauthorizedHandler, ApiError } from './api.js';
import { PAGES } from './pages.js';

const main = document.getElementById('main');
const nav = document.getElementById('nav');
const logout = document.getElementById('logout');
let current = null; // the AbortController of the page on screen
let interactive = false;

/** Marks the first rendered page (the bench reads this mark). */
function ready(name) {
  document.documentElement.dataset.page = name;
  if (!interactive) {
    interactive = true;
    performance.mark('interactive');
  }
}

function route() {
  const parts = location.hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent);
  const name = parts[0] && (PAGES[parts[0]] || parts[0] === 'login') ? parts[0] : 'overview';
  return { name, args: parts.slice(1).filter((p) => p !== '') };
}

function buildNav(active) {
  nav.replaceChildren(...Object.entries(PAGES).map(([key, page]) =>
    h('a', { href: `#/${key}`, 'aria-current': key === active ? 'page' : undefined }, page.title)));
}

async function render() {
  if (current) current.abort();
  current = new AbortController();
  const signal = current.signal;
  const { name, args } = route();
  delete document.documentElement.dataset.page;
  if (!token.get() || name === 'login') {
    nav.hidden = true;
    logout.hidden = true;
    loginPage();
    return;
  }
  nav.hidden = false;
  logout.hidden = false;
  buildNav(name);
  const page = PAGES[name];
  document.title = `${page.title} · Warren`;
  const body = h('div', { class: 'page' });
  main.replaceChildren(h('h1', {}, page.title), body);
  try {
    await page.render(body, args, signal);
    if (!signal.aborted) ready(name);
  } catch (e) {
    if (aborted(e)) return;
    showError(body, e);
    ready(name);
  }
}

function loginPage() {
  document.title = 'Log in · Warren';
  const status = h('div', { role: 'status', 'aria-live': 'polite' });
  const code = h('input', { id: 'pair-code', name: 'code', inputmode: 'numeric', autocomplete: 'one-time-code', required: true });
  const device = h('input', { id: 'pair-device', name: 'device', value: 'dashboard', required: true, maxlength: 64 });
  const pasted = h('input', { id: 'token', name: 'token', type: 'password', autocomplete: 'off', required: true });
  const finish = async (t) => {
    token.set(t);
    try {
      await api('GET', '/api/status');
    } catch (e) {
      token.clear();
      throw e;
    }
    location.hash = '#/overview';
    render();
  };
  const pairForm = h('form', {
    id: 'pair-form',
    onsubmit: async (ev) => {
      ev.preventDefault();
      status.textContent = 'Pairing…';
      try {
        const paired = await api('POST', '/pair', { code: code.value.trim(), device: device.value.trim() });
        await finish(paired.token);
      } catch (e) { showError(status, e); }
    },
  },
  h('h2', {}, 'Pairing code'),
  h('p', { class: 'muted' }, 'Run ', h('code', {}, 'warren pair'), ' on the host and enter the code it prints.'),
  field('Code', code), field('Device name', device),
  h('button', { type: 'submit' }, 'Pair and log in'));
  const tokenForm = h('form', {
    id: 'token-form',
    onsubmit: async (ev) => {
      ev.preventDefault();
      status.textContent = 'Checking…';
      try { await finish(pasted.value.trim()); } catch (e) { showError(status, e); }
    },
  },
  h('h2', {}, 'Bearer token'),
  h('p', { class: 'muted' }, 'Or paste a token (wrn_…). It is kept in this tab only and forgotten on log out.'),
  field('Token', pasted),
  h('button', { type: 'submit' }, 'Log in'));
  main.replaceChildren(h('h1', {}, 'Log in'), h('div', { class: 'login' }, pairForm, tokenForm), status);
  const why = sessionStorage.getItem('warren.why');
  if (why) {
    sessionStorage.removeItem('warren.why');
    status.replaceChildren(h('pre', { class: 'error', role: 'alert' }, `Logged out: ${why}`));
  }
  ready('login');
  code.focus();
}

logout.addEventListener('click', () => {
  // Forgets the token in this tab; the device stays paired (revoke it on the agents' host).
  token.clear();
  location.hash = '#/login';
  render();
});

setUnauthorizedHandler((e) => {
  if (e instanceof ApiError && token.get()) {
    token.clear();
    sessionStorage.setItem('warren.why', e.shown);
    location.hash = '#/login';
  }
});

// The skip link moves focus to the page; it is not a route.
document.querySelector('.skip').addEventListener('click', (ev) => {
  ev.preventDefault();
  main.focus();
});
window.addEventListener('hashchange', render);
window.addEventListener('unhandledrejection', (ev) => { if (aborted(ev.reason)) ev.preventDefault(); });
render();
