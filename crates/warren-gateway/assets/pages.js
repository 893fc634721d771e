// Warren dashboard pages. Each entry of PAGES is { title, render(el, args, signal) }: render
// fills `el` from the public API and returns once the page is usable; live parts keep running
// until `signal` aborts (the operator navigated away). A new page is one more entry.

import { api, stream, h, field, table, errorBox, showError, aborted, fmtTime, usd, enc } from './api.js';

const short = (v, n = 300) => {
  const s = typeof v === 'string' ? v : JSON.stringify(v);
  return s && s.length > n ? `${s.slice(0, n)}…` : (s || '');
};

const sleep = (ms, signal) => new Promise((resolve, reject) => {
  const t = setTimeout(resolve, ms);
  signal.addEventListener('abort', () => { clearTimeout(t); reject(new DOMException('aborted', 'AbortError')); }, { once: true });
});

/** Runs `work` detached from the render; shows its error in `slot` unless aborted. */
function live(slot, work) {
  work().catch((e) => { if (!aborted(e)) slot.replaceChildren(errorBox(e)); });
}

/** A button that runs `action`, shows its error (as the API said it) in `slot`. */
function button(text, attrs, slot, action) {
  return h('button', {
    type: 'button',
    ...attrs,
    onclick: async (ev) => {
      ev.currentTarget.disabled = true;
      const b = ev.currentTarget;
      try { await action(); } catch (e) { showError(slot, e); } finally { b.disabled = false; }
    },
  }, text);
}

/** An agent <select> filled from GET /api/agents; navigates to #/<page>/<alias> on change. */
async function agentPicker(page, selected, signal) {
  const { agents } = await api('GET', '/api/agents', undefined, signal);
  const alias = selected || (agents.find((a) => a.default) || agents[0] || {}).alias;
  const select = h('select', {
    id: 'agent',
    onchange: () => { location.hash = `#/${page}/${enc(select.value)}`; },
  }, agents.map((a) => h('option', { value: a.alias, selected: a.alias === alias }, a.alias)));
  return { alias, control: field('Agent', select), agents };
}

function kv(obj) {
  return h('dl', { class: 'kv' }, Object.entries(obj || {}).flatMap(([k, v]) => [
    h('dt', {}, k), h('dd', {}, typeof v === 'object' && v !== null ? short(v, 400) : String(v)),
  ]));
}

const badge = (s) => h('span', { class: `badge ${s === 'ok' || s === true ? 'ok' : (s === 'starting' ? 'warn' : 'bad')}` }, String(s));

// ---------------------------------------------------------------------------------------------
const overview = {
  title: 'Overview',
  async render(el, _args, signal) {
    const [health, status, costs] = await Promise.all([
      api('GET', '/api/health', undefined, signal),
      api('GET', '/api/status', undefined, signal),
      api('GET', '/api/costs?limit=1000', undefined, signal),
    ]);
    const today = new Date().toISOString().slice(0, 10);
    const todays = costs.records.filter((r) => String(r.time).slice(0, 10) === today);
    const spent = todays.reduce((s, r) => s + r.cost_usd, 0);
    const components = Object.entries(health.components).map(([name, c]) => ({ name, c }));
    el.append(
      h('section', { class: 'cards' },
        h('div', { class: 'card' }, h('h2', {}, 'Health'), badge(health.status),
          h('p', {}, `pid ${health.pid}, up ${health.uptime_secs} s`)),
        h('div', { class: 'card' }, h('h2', {}, 'Generation'),
          h('p', {}, `config ${status.config_generation}, daemon ${status.daemon_generation}`),
          h('p', { class: 'muted' }, `since ${fmtTime(status.generation_since_unix)} · v${status.version}`)),
        h('div', { class: 'card' }, h('h2', {}, 'Costs today'), h('p', { id: 'costs-today', class: 'big' }, usd(spent)),
          h('p', { class: 'muted' }, `${todays.length} requests (UTC day)`))),
      table('Components', [
        ['Component', (r) => r.name],
        ['Status', (r) => badge(r.c.status === undefined ? 'ok' : r.c.status)],
        ['Detail', (r) => short(Object.fromEntries(Object.entries(r.c).filter(([k]) => k !== 'status')), 200)],
      ], components),
      table('Agents and sandbox posture', [
        ['Agent', (a) => h('a', { href: `#/chat/${enc(a.alias)}` }, a.alias)],
        ['Model', (a) => `${a.provider || ''} ${a.model || ''}`],
        ['Risk profile', (a) => a.risk_profile],
        ['Ready', (a) => badge(a.ok ? 'ok' : 'error')],
        ['Sandbox', (a) => (a.sandbox && a.sandbox.level) || short(a.sandbox, 120)],
        ['Network', (a) => (a.sandbox && a.sandbox.network) || ''],
      ], status.agents || []),
    );
  },
};

// ---------------------------------------------------------------------------------------------
const agents = {
  title: 'Agents',
  async render(el, _args, signal) {
    const panel = h('section', { id: 'agent-panel', 'aria-live': 'polite' });
    const list = h('div');
    const archives = h('div');
    const refresh = async () => {
      const data = await api('GET', '/api/agents', undefined, signal);
      list.replaceChildren(table('Agents', [
        ['Alias', (a) => h('a', { href: `#/chat/${enc(a.alias)}` }, a.alias)],
        ['Provider', (a) => a.provider || ''],
        ['Model', (a) => a.model || ''],
        ['Risk profile', (a) => a.risk_profile],
        ['Ready', (a) => badge(a.ok === null ? 'starting' : (a.ok ? 'ok' : 'error'))],
        ['Actions', (a) => h('span', { class: 'actions' },
          h('button', { type: 'button', 'data-action': 'rename', 'data-alias': a.alias, onclick: () => renameForm(a.alias) }, 'Rename'),
          button('Delete…', { 'data-action': 'delete', 'data-alias': a.alias, class: 'danger' }, panel, () => deletePlan(a.alias)))],
      ], data.agents));
      const arch = await api('GET', '/api/agents/restore', undefined, signal);
      archives.replaceChildren(table('Delete archives (restore)', [
        ['Archive', (r) => r.name],
        ['Alias', (r) => r.alias || ''],
        ['Deleted', (r) => fmtTime(r.deleted_at)],
        ['State', (r) => r.error || (r.restored ? 'restored' : (r.complete ? 'complete' : 'incomplete'))],
        ['Restore', (r) => (r.restored || r.error ? '' : restoreControl(r))],
      ], arch.archives));
    };
    const report = (title, r) => {
      panel.replaceChildren(h('div', { id: 'agent-result', class: 'notice' }, h('h2', {}, title), kv(r)));
    };
    const renameForm = (alias) => {
      const to = h('input', { id: 'rename-to', required: true, value: alias });
      panel.replaceChildren(h('form', {
        id: 'rename-form',
        onsubmit: async (ev) => {
          ev.preventDefault();
          try {
            const r = await api('POST', `/api/agents/${enc(alias)}/rename`, { to: to.value.trim() });
            report(`Renamed ${alias} → ${r.to}`, r);
            await refresh();
          } catch (e) { panel.append(errorBox(e)); }
        },
      }, h('h2', {}, `Rename ${alias}`),
      h('p', { class: 'muted' }, 'Rewrites config references, moves the workspace and repoints every store (LIFE-3).'),
      field('New alias', to), h('button', { type: 'submit' }, 'Rename')));
      to.focus();
      to.select();
    };
    const deletePlan = async (alias) => {
      const plan = await api('GET', `/api/agents/${enc(alias)}/delete-plan`);
      const confirm = h('input', { id: 'delete-confirm', autocomplete: 'off' });
      const go = h('button', { id: 'delete-go', type: 'submit', class: 'danger', disabled: true }, `Delete ${alias}`);
      confirm.addEventListener('input', () => { go.disabled = confirm.value !== alias; });
      const sites = (list) => (list.length ? h('ul', {}, list.map((s) => h('li', {}, short(s, 200)))) : h('p', { class: 'muted' }, 'none'));
      panel.replaceChildren(h('form', {
        id: 'delete-plan',
        onsubmit: async (ev) => {
          ev.preventDefault();
          if (confirm.value !== alias) return;
          try {
            const r = await api('DELETE', `/api/agents/${enc(alias)}`);
            report(`Deleted ${alias}`, r);
            await refresh();
          } catch (e) { panel.append(errorBox(e)); }
        },
      },
      h('h2', {}, `Delete ${alias}: plan`),
      h('p', {}, plan.allowed ? 'Allowed. The workspace and every store are archived under data/agents/_deleted/.' : 'Refused:'),
      plan.reasons.length ? h('ul', { class: 'error' }, plan.reasons.map((r) => h('li', {}, r))) : null,
      h('h3', {}, 'Blocking references'), sites(plan.blockers),
      h('h3', {}, 'References scrubbed from config'), sites(plan.scrubs),
      h('h3', {}, 'Records archived per store'), kv(plan.stores),
      kv({ workspace: plan.workspace, workspace_action: plan.workspace_action, live_acp_sessions: plan.live_acp_sessions }),
      plan.allowed ? [field(`Type “${alias}” to confirm`, confirm), go] : null));
      if (plan.allowed) confirm.focus();
    };
    const restoreControl = (r) => {
      const as = h('input', { 'aria-label': `Restore ${r.name} as (optional new alias)`, 'data-archive-as': r.name, placeholder: 'as (optional)', size: 10 });
      return h('span', { class: 'actions' }, as, button('Restore', { 'data-archive': r.name }, panel, async () => {
        const body = { archive: r.name };
        if (as.value.trim()) body.as = as.value.trim();
        report(`Restored ${r.name}`, await api('POST', '/api/agents/restore', body));
        await refresh();
      }));
    };
    const add = {
      alias: h('input', { required: true }),
      provider: h('input', { placeholder: 'default' }),
      model: h('input', { placeholder: 'default' }),
      risk: h('input', { placeholder: 'default' }),
    };
    const addForm = h('form', {
      id: 'add-agent',
      onsubmit: async (ev) => {
        ev.preventDefault();
        const body = { alias: add.alias.value.trim() };
        if (add.provider.value.trim()) body.provider = add.provider.value.trim();
        if (add.model.value.trim()) body.model = add.model.value.trim();
        if (add.risk.value.trim()) body.risk_profile = add.risk.value.trim();
        try {
          const r = await api('POST', '/api/agents', body);
          report(`Added ${r.alias}`, r);
          panel.append(button('Reload the daemon now', {}, panel, async () => {
            report('Reloaded', await api('POST', '/admin/reload'));
            await refresh();
          }));
          await refresh();
        } catch (e) { panel.replaceChildren(errorBox(e)); }
      },
    }, h('h2', {}, 'Add an agent'),
    h('div', { class: 'row' }, field('Alias', add.alias), field('Provider', add.provider), field('Model', add.model), field('Risk profile', add.risk)),
    h('button', { type: 'submit' }, 'Add'));
    el.append(list, panel, addForm, archives);
    await refresh();
  },
};

// ---------------------------------------------------------------------------------------------
const chat = {
  title: 'Chat',
  async render(el, args, signal) {
    const { alias, control } = await agentPicker('chat', args[0], signal);
    if (!alias) { el.append(h('p', {}, 'No agent is configured.')); return; }
    const session = h('input', { id: 'chat-session', placeholder: 'new session', value: args[1] || '' });
    const log = h('div', { id: 'transcript', role: 'log', 'aria-live': 'polite' });
    const input = h('textarea', { id: 'chat-input', rows: 3, required: true });
    const send = h('button', { id: 'chat-send', type: 'submit' }, 'Send');
    const turn = async (message) => {
      log.append(h('div', { class: 'msg user' }, h('strong', {}, 'you'), h('p', {}, message)));
      const text = h('p', {});
      const bubble = h('div', { class: 'msg assistant' }, h('strong', {}, alias), text);
      log.append(bubble);
      const body = { message };
      if (session.value.trim()) body.session = session.value.trim();
      await stream('POST', `/api/agents/${enc(alias)}/chat`, body, (name, d) => {
        if (name === 'delta') text.append(d.text);
        else if (name === 'notice') bubble.append(h('p', { class: 'notice' }, d.notice));
        else if (name === 'tool_call') bubble.append(h('div', { class: 'tool' }, `→ ${d.name} ${short(d.arguments, 400)}`));
        else if (name === 'tool_result') {
          bubble.append(h('div', { class: `tool ${d.ok ? '' : 'failed'}`, 'data-result': d.name },
            `← ${d.name} ${d.ok ? 'ok' : 'failed'}: ${short(d.content, 600)}`));
        } else if (name === 'approval') bubble.append(approvalBox(d));
        else if (name === 'done') {
          if (!text.textContent && d.reply) text.textContent = d.reply;
          session.value = d.session;
          bubble.dataset.done = 'true';
          bubble.append(h('p', { class: 'muted' }, `${d.input_tokens} in / ${d.output_tokens} out tokens · session ${d.session}`));
        } else if (name === 'error') {
          bubble.append(h('pre', { class: 'error', role: 'alert' }, `${d.error}: ${d.message}`));
          bubble.dataset.done = 'error';
        }
        log.scrollTop = log.scrollHeight;
      }, signal).catch((e) => {
        if (!aborted(e)) { bubble.append(errorBox(e)); bubble.dataset.done = 'error'; }
      });
    };
    el.append(h('form', {
      id: 'chat-form',
      class: 'chat',
      onsubmit: async (ev) => {
        ev.preventDefault();
        const message = input.value.trim();
        if (!message) return;
        input.value = '';
        send.disabled = true;
        try { await turn(message); } finally { send.disabled = false; input.focus(); }
      },
    }, h('div', { class: 'row' }, control, field('Session', session)), log, field('Message', input), send));
    input.addEventListener('keydown', (ev) => {
      if (ev.key === 'Enter' && (ev.ctrlKey || ev.metaKey)) ev.currentTarget.form.requestSubmit();
    });
  },
};

/** An approval asked for in a turn, answered inline. */
function approvalBox(d) {
  const box = h('div', { class: 'approval', role: 'group', 'aria-label': `Approval ${d.approval}` },
    h('p', {}, h('strong', {}, `${d.name} waits for approval`), ` (${d.reason}; denied after ${d.timeout_secs} s)`),
    h('pre', {}, short(d.arguments, 1000)));
  const decide = (approve) => async () => {
    const r = await api('POST', `/api/approvals/${enc(d.approval)}`, { approve });
    box.replaceChildren(h('p', { class: 'decided' }, `${d.name}: ${r.decision}`));
  };
  box.append(h('span', { class: 'actions' },
    button('Approve', { class: 'approve', 'data-approval': d.approval }, box, decide(true)),
    button('Deny', { class: 'deny danger', 'data-approval': d.approval }, box, decide(false))));
  return box;
}

// ---------------------------------------------------------------------------------------------
const sessions = {
  title: 'Sessions',
  async render(el, args, signal) {
    const { alias, control } = await agentPicker('sessions', args[0], signal);
    if (!alias) { el.append(h('p', {}, 'No agent is configured.')); return; }
    const { sessions: all } = await api('GET', `/api/agents/${enc(alias)}/sessions`, undefined, signal);
    const search = h('input', { id: 'session-search', type: 'search' });
    const list = h('div');
    const show = () => {
      const q = search.value.trim().toLowerCase();
      const rows = all.filter((s) => !q || `${s.key} ${s.name || ''} ${s.channel || ''}`.toLowerCase().includes(q));
      list.replaceChildren(table(`Sessions of ${alias}`, [
        ['Session', (s) => h('a', { href: `#/sessions/${enc(alias)}/${enc(s.key)}` }, s.key)],
        ['Name', (s) => s.name || ''],
        ['Channel', (s) => s.channel || ''],
        ['State', (s) => s.state],
        ['Messages', (s) => s.message_count],
        ['Updated', (s) => fmtTime(s.updated_at)],
      ], rows));
    };
    search.addEventListener('input', show);
    show();
    el.append(h('div', { class: 'row' }, control, field('Search', search)), list);
    if (args[1]) el.append(await history(alias, args[1], signal));
  },
};

async function history(alias, key, signal) {
  const box = h('section', { id: 'history' }, h('h2', {}, `History of ${key}`));
  const list = h('ol', { class: 'history' });
  const more = h('div');
  const page = async (after) => {
    const r = await api('GET', `/api/agents/${enc(alias)}/sessions/${enc(key)}?after=${after}&limit=50`, undefined, signal);
    for (const m of r.messages) {
      list.append(h('li', { class: `msg ${m.role}` }, h('strong', {}, `${m.role} · ${fmtTime(m.created_at)}`), h('p', {}, m.content)));
    }
    more.replaceChildren(r.messages.length === 50 && r.next_after !== null
      ? button('Older… (next page)', {}, more, () => page(r.next_after)) : '');
  };
  await page(0);
  box.append(list, more);
  return box;
}

// ---------------------------------------------------------------------------------------------
const memory = {
  title: 'Memory',
  async render(el, args, signal) {
    const { alias, control } = await agentPicker('memory', args[0], signal);
    if (!alias) { el.append(h('p', {}, 'No agent is configured.')); return; }
    const q = h('input', { id: 'memory-q', type: 'search' });
    const results = h('div', { 'aria-live': 'polite' });
    const detail = h('section', { id: 'memory-entry', 'aria-live': 'polite' });
    const recall = async () => {
      const query = q.value.trim() ? `q=${enc(q.value.trim())}&limit=50` : 'limit=50';
      const r = await api('GET', `/api/agents/${enc(alias)}/memory?${query}`, undefined, signal);
      const open = (key) => memoryEntry(detail, alias, key, recall, signal).catch((e) => showError(detail, e));
      results.replaceChildren(table(`${r.count} memories of ${alias}`, [
        ['Key', (m) => h('button', { type: 'button', class: 'link', 'data-key': m.key, onclick: () => open(m.key) }, m.key)],
        ['Category', (m) => m.category], ['Content', (m) => short(m.content, 500)],
        ['Score', (m) => (typeof m.score === 'number' ? m.score.toFixed(3) : '')],
        ['Provenance', (m) => short({ session: m.session, version: m.version, ...(m.provenance || {}) }, 200)],
        ['Updated', (m) => fmtTime(m.updated_at)],
      ], r.hits));
    };
    el.append(h('form', {
      id: 'memory-form',
      class: 'row',
      onsubmit: (ev) => { ev.preventDefault(); recall().catch((e) => showError(results, e)); },
    }, control, field('Recall', q), h('button', { type: 'submit' }, 'Recall')), results, detail);
    await recall();
  },
};

/** One memory key in `box`: the live entry with its provenance (or that it is forgotten), its
 *  kept versions, and Forget / Undo; `changed` refreshes the recall list after either. */
async function memoryEntry(box, alias, key, changed, signal) {
  const path = `/api/agents/${enc(alias)}/memory/${enc(key)}`;
  let entry = null;
  try {
    entry = (await api('GET', path, undefined, signal)).entry;
  } catch (e) {
    if (!(e.status === 404 && e.code === 'unknown_memory')) throw e;
  }
  const { versions } = await api('GET', `${path}/history`, undefined, signal);
  const slot = h('div');
  const redraw = async () => {
    await changed();
    await memoryEntry(box, alias, key, changed, signal);
  };
  const by = (p) => [p.agent || 'operator', p.channel && `via ${p.channel}`, p.session && `session ${p.session}`]
    .filter(Boolean).join(' ');
  const facts = (e) => h('dl', { class: 'facts' },
    [['Version', e.version], ['Category', e.category], ['Trust', e.provenance.trust], ['Written by', by(e.provenance)],
      ['Tool call', e.provenance.tool_call], ['Receipt', e.provenance.receipt], ['Updated', fmtTime(e.updated_at)]]
      .filter(([, v]) => v !== undefined && v !== null && v !== '')
      .flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, String(v))]));
  box.dataset.version = entry ? String(entry.version) : 'forgotten';
  box.replaceChildren(
    h('h2', {}, `Memory ${key}`),
    ...(entry ? [facts(entry), h('pre', { class: 'memory-content' }, entry.content)]
      : [h('p', { class: 'muted' }, 'Forgotten: no live version (Undo brings the last one back).')]),
    h('div', { class: 'row' },
      entry ? button('Forget', { id: 'memory-forget' }, slot, async () => { await api('DELETE', path, undefined, signal); await redraw(); }) : '',
      button('Undo', { id: 'memory-undo' }, slot, async () => { await api('POST', `${path}/undo`, undefined, signal); await redraw(); })),
    slot,
    table(`History of ${key}`, [
      ['Version', (v) => v.version], ['State', (v) => v.state], ['Trust', (v) => v.provenance.trust],
      ['By', (v) => by(v.provenance)], ['Written', (v) => fmtTime(v.updated_at)], ['Content', (v) => short(v.content, 200)],
    ], versions));
}

// ---------------------------------------------------------------------------------------------
const approvals = {
  title: 'Approvals',
  async render(el, _args, signal) {
    const list = h('div', { id: 'approvals', 'aria-live': 'polite' });
    const slot = h('div');
    const load = async () => {
      const r = await api('GET', '/api/approvals', undefined, signal);
      list.replaceChildren(table(`${r.count} waiting`, [
        ['Id', (p) => p.id], ['Agent', (p) => p.agent], ['Tool', (p) => p.tool],
        ['Arguments', (p) => short(p.arguments, 300)], ['Reason', (p) => p.reason],
        ['Asked', (p) => fmtTime(p.created_unix)],
        ['Decide', (p) => h('span', { class: 'actions' },
          button('Approve', { class: 'approve', 'data-approval': p.id }, slot, async () => { await api('POST', `/api/approvals/${enc(p.id)}`, { approve: true }); await load(); }),
          button('Deny', { class: 'deny danger', 'data-approval': p.id }, slot, async () => { await api('POST', `/api/approvals/${enc(p.id)}`, { approve: false }); await load(); }))],
      ], r.pending));
    };
    el.append(h('p', { class: 'muted' }, 'Live: refreshed every 2 s.'), slot, list);
    await load();
    live(slot, async () => { for (;;) { await sleep(2000, signal); await load(); } });
  },
};

// ---------------------------------------------------------------------------------------------
function barChart(label, rows) {
  const max = Math.max(...rows.map((r) => r.value), 0) || 1;
  const w = 600; const bh = 22; const height = rows.length * bh + 4;
  return h('svg:svg', { viewBox: `0 0 ${w} ${height}`, class: 'chart', role: 'img', 'aria-label': label },
    rows.map((r, i) => {
      const bw = Math.max(1, Math.round((r.value / max) * (w - 260)));
      return h('svg:g', {},
        h('svg:text', { x: 0, y: i * bh + 15, class: 'label' }, r.label),
        h('svg:rect', { x: 110, y: i * bh + 3, width: bw, height: bh - 6, class: 'bar' }, h('svg:title', {}, `${r.label}: ${usd(r.value)}`)),
        h('svg:text', { x: 116 + bw, y: i * bh + 15, class: 'value' }, usd(r.value)));
    }));
}

const costs = {
  title: 'Costs',
  async render(el, _args, signal) {
    const r = await api('GET', '/api/costs?limit=1000', undefined, signal);
    const group = (key) => {
      const m = new Map();
      for (const rec of r.records) {
        const k = key(rec);
        const t = m.get(k) || { key: k, requests: 0, input: 0, output: 0, usd: 0 };
        t.requests += 1; t.input += rec.input_tokens; t.output += rec.output_tokens; t.usd += rec.cost_usd;
        m.set(k, t);
      }
      return [...m.values()];
    };
    const cols = (name) => [[name, (t) => t.key], ['Requests', (t) => t.requests], ['Input tokens', (t) => t.input], ['Output tokens', (t) => t.output], ['Cost', (t) => usd(t.usd)]];
    const days = group((rec) => String(rec.time).slice(0, 10)).sort((a, b) => a.key.localeCompare(b.key)).slice(-14);
    const perAgent = Object.entries(r.per_agent).map(([k, t]) => ({ key: k, requests: t.requests, input: t.input_tokens, output: t.output_tokens, usd: t.cost_usd }));
    el.append(
      h('p', {}, `Total ${usd(r.total_usd)} over ${r.requests} requests (per model and per day: the newest ${r.records.length}).`),
      h('h2', {}, 'Per day (UTC)'),
      barChart('Cost per day', days.map((d) => ({ label: d.key, value: d.usd }))),
      table('Per day', cols('Day'), days),
      table('Per agent', cols('Agent'), perAgent),
      table('Per model', cols('Provider / model'), group((rec) => `${rec.provider} / ${rec.model}`)),
    );
  },
};

// ---------------------------------------------------------------------------------------------
const KINDS = ['', 'turn_start', 'turn_end', 'provider_call', 'tool_call', 'approval', 'notice', 'error'];
const logFilter = { agent: '', kind: '' };

const logs = {
  title: 'Logs',
  async render(el, _args, signal) {
    const agent = h('input', { id: 'log-agent', value: logFilter.agent });
    const kind = h('select', { id: 'log-kind' }, KINDS.map((k) => h('option', { value: k, selected: k === logFilter.kind }, k || 'any')));
    const state = h('span', { id: 'live-status', role: 'status' }, 'connecting…');
    const rows = h('tbody', { id: 'log-rows' });
    const query = () => {
      const p = [];
      if (logFilter.agent) p.push(`agent=${enc(logFilter.agent)}`);
      if (logFilter.kind) p.push(`kind=${enc(logFilter.kind)}`);
      return p.join('&');
    };
    const row = (e, isLive) => h('tr', { class: isLive ? 'live' : '' },
      h('td', {}, fmtTime(e.time)), h('td', {}, e.kind), h('td', {}, e.agent), h('td', {}, e.session || ''), h('td', {}, short(e.data, 300)));
    el.append(h('form', {
      class: 'row',
      onsubmit: (ev) => {
        ev.preventDefault();
        logFilter.agent = agent.value.trim();
        logFilter.kind = kind.value;
        window.dispatchEvent(new HashChangeEvent('hashchange'));
      },
    }, field('Agent', agent), field('Kind', kind), h('button', { type: 'submit' }, 'Filter'), state),
    h('div', { class: 'scroll' }, h('table', {}, h('caption', {}, 'Events, newest first'),
      h('thead', {}, h('tr', {}, ['Time', 'Kind', 'Agent', 'Session', 'Data'].map((c) => h('th', { scope: 'col' }, c)))), rows)));
    const past = await api('GET', `/api/logs?limit=100&${query()}`, undefined, signal);
    rows.append(...past.events.reverse().map((e) => row(e, false)));
    if (past.persistence === 'none') state.textContent = 'persistence off: live events only';
    const slot = h('div');
    el.prepend(slot);
    live(slot, async () => {
      await stream('GET', `/api/events?${query()}`, undefined, (name, d) => {
        if (name === 'trace') rows.prepend(row(d, true));
        else if (name === 'lagged') rows.prepend(h('tr', {}, h('td', { colspan: 5, class: 'error' }, `missed ${d.missed} events (too slow)`)));
      }, signal, () => { state.textContent = 'live'; state.dataset.live = 'true'; });
      state.textContent = 'stream ended (the daemon reloaded or stopped); reopen the page';
    });
  },
};

// ---------------------------------------------------------------------------------------------
const cron = {
  title: 'Cron',
  async render(el, args, signal) {
    const slot = h('div', { 'aria-live': 'polite' });
    const list = h('div');
    const runs = h('div');
    const load = async () => {
      const r = await api('GET', '/api/cron', undefined, signal);
      const act = (j, what) => button(what, { 'data-job': j.name }, slot, async () => {
        await api('POST', `/api/cron/${enc(j.name)}/${what.toLowerCase()}`);
        await load();
      });
      list.replaceChildren(h('p', {}, `Scheduler: ${r.scheduler}`), table('Jobs', [
        ['Job', (j) => h('a', { href: `#/cron/${enc(j.name)}` }, j.name)], ['Agent', (j) => j.agent || ''],
        ['Schedule', (j) => `${j.schedule_kind} ${j.schedule}${j.tz ? ' ' + j.tz : ''}`],
        ['State', (j) => `${j.state}${j.paused_reason ? ': ' + j.paused_reason : ''}`],
        ['Next', (j) => fmtTime(j.next_fire)], ['Failures', (j) => j.failures],
        ['Actions', (j) => h('span', { class: 'actions' }, act(j, 'Run'), j.enabled ? act(j, 'Pause') : act(j, 'Resume'))],
      ], r.jobs));
    };
    el.append(slot, list, runs);
    await load();
    if (args[0]) {
      const r = await api('GET', `/api/cron/${enc(args[0])}/runs`, undefined, signal);
      runs.replaceChildren(table(`Runs of ${args[0]}`, [
        ['Run', (x) => x.id], ['Trigger', (x) => x.trigger], ['Status', (x) => x.status],
        ['Started', (x) => fmtTime(x.started_at)], ['Tokens', (x) => `${x.tokens_in} / ${x.tokens_out}`],
        ['Cost', (x) => usd(x.cost_usd)], ['Detail', (x) => short(x.error || x.delivery_error || x.output || '', 300)],
      ], r.runs));
    }
  },
};

const sops = {
  title: 'SOPs',
  async render(el, args, signal) {
    const slot = h('div', { 'aria-live': 'polite' });
    const r = await api('GET', '/api/sops', undefined, signal);
    el.append(slot, table('Procedures', [
      ['SOP', (s) => h('a', { href: `#/sops/${enc(s.name)}` }, s.name)], ['Description', (s) => s.description || ''],
      ['Agent', (s) => s.agent || ''], ['Trigger', (s) => short(s.trigger, 100)], ['Steps', (s) => s.steps],
    ], r.sops));
    if (r.problems && r.problems.length) el.append(h('ul', { class: 'error' }, r.problems.map((p) => h('li', {}, short(p, 300)))));
    if (args[0] && args[0] !== 'run') {
      const runs = await api('GET', `/api/sops/${enc(args[0])}/runs`, undefined, signal);
      el.append(table(`Runs of ${args[0]}`, [
        ['Run', (x) => h('a', { href: `#/sops/run/${enc(x.id)}` }, x.id)], ['Status', (x) => x.status],
        ['Trigger', (x) => x.trigger], ['Started', (x) => fmtTime(x.created_at)], ['Detail', (x) => short(x.error || '', 200)],
      ], runs.runs));
    }
    if (args[0] === 'run' && args[1]) {
      const d = await api('GET', `/api/sops/runs/${enc(args[1])}`, undefined, signal);
      // A waiting run waits at the step its index points to: the field starts with its id.
      const at = d.run.status === 'waiting' ? ((d.run.definition && d.run.definition.steps) || [])[d.run.step_index] : null;
      const step = h('input', { id: 'sop-step', placeholder: 'step', value: (at && at.id) || '' });
      const decide = (what) => button(what, { 'data-sop-decision': what.toLowerCase() }, slot, async () => {
        await api('POST', `/api/sops/runs/${enc(args[1])}/${what.toLowerCase()}`, { step: step.value.trim() });
        window.dispatchEvent(new HashChangeEvent('hashchange'));
      });
      el.append(h('h2', {}, `Run ${args[1]}`), kv(d.run),
        table('Steps', [['Step', (s) => s.step_id], ['Kind', (s) => s.kind], ['Status', (s) => s.status], ['Output', (s) => short(s.output, 300)], ['Receipt', (s) => s.receipt || '']], d.steps || []),
        table('Events', [['When', (e) => fmtTime(e.at)], ['Who', (e) => e.who], ['What', (e) => e.what], ['Why', (e) => e.why || '']], d.events || []),
        h('div', { class: 'row' }, field('Gate step', step), decide('Approve'), decide('Deny')));
    }
  },
};

export const PAGES = { overview, agents, chat, sessions, memory, approvals, costs, logs, cron, sops };
