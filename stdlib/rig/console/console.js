// luarig web console: plain JavaScript, no build step, no external requests.
//
// Talks to the rig.serve API on the same origin. With a bearer token
// configured the page asks for it and sends it on every call; the event
// stream is read with fetch() (EventSource cannot send an Authorization
// header) and parsed here, which also lets us send Last-Event-ID ourselves
// when reconnecting. Enduring events carry their journal seq as the SSE id:
// the view remembers the last one and ignores anything at or below it.
// Text arrives as ephemeral TokenDelta events; the enduring StepDone that
// ends a step carries the whole message and replaces what the deltas drew,
// so a stream that dropped mid-step (or a page reloaded, replaying the
// journal with ?from=0) never shows a piece of text twice.
'use strict';

(function () {
  const $ = (id) => document.getElementById(id);
  const TOKEN_KEY = 'luarig.token';
  let token = sessionStorage.getItem(TOKEN_KEY) || '';
  let view = null;          // the open session view
  let listTimer = null;
  let sessions = [];

  class AuthError extends Error {}

  function headers(extra) {
    const h = Object.assign({}, extra || {});
    if (token) h.Authorization = 'Bearer ' + token;
    return h;
  }

  async function api(method, path, body) {
    const init = { method, headers: headers(), cache: 'no-store' };
    // the server takes a POST only as application/json, with a body or not
    if (method === 'POST') init.headers['Content-Type'] = 'application/json';
    if (body !== undefined) init.body = JSON.stringify(body);
    const resp = await fetch(path, init);
    if (resp.status === 401) { askToken(token ? 'the token was refused' : ''); throw new AuthError('unauthorized'); }
    let data = null;
    try { data = await resp.json(); } catch (e) { data = null; }
    if (!resp.ok) {
      const e = new Error(data && data.error ? data.error.code + ': ' + data.error.message : 'HTTP ' + resp.status);
      e.status = resp.status;
      e.code = data && data.error && data.error.code;
      throw e;
    }
    return data;
  }

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = text;
    return e;
  }

  function setConn(state, label) {
    const c = $('conn');
    c.className = 'conn ' + state;
    c.textContent = label || state;
  }

  function flash(msg) {
    const log = $('log');
    log.appendChild(el('div', 'error', msg));
    log.scrollTop = log.scrollHeight;
  }

  function money(c) {
    return '$' + (typeof c === 'number' ? c : 0).toFixed(4);
  }

  function summarize(v, max) {
    let s;
    try { s = typeof v === 'string' ? v : JSON.stringify(v); } catch (e) { s = String(v); }
    if (s === undefined) s = '';
    max = max || 160;
    return s.length > max ? s.slice(0, max - 1) + '…' : s;
  }

  // ---- authentication ----

  function askToken(why) {
    $('auth').hidden = false;
    $('auth-error').textContent = why || '';
    setConn('offline', 'token needed');
    $('token').focus();
  }

  $('auth').addEventListener('submit', (e) => {
    e.preventDefault();
    token = $('token').value.trim();
    sessionStorage.setItem(TOKEN_KEY, token);
    $('token').value = '';
    $('auth').hidden = true;
    start();
  });

  // ---- the session list ----

  async function refreshList() {
    let page;
    try {
      page = await api('GET', '/v1/sessions?limit=200');
    } catch (e) {
      if (!(e instanceof AuthError)) setConn('offline', 'server unreachable');
      return false;
    }
    sessions = page.sessions || [];
    const ul = $('sessions');
    ul.textContent = '';
    for (const s of sessions) {
      const li = el('li');
      li.dataset.id = s.id;
      if (view && view.id === s.id) li.classList.add('current');
      const title = s.title || (view && view.id === s.id && view.title) || '';
      li.appendChild(el('span', 'title', title || s.id.slice(0, 8)));
      const meta = el('span', 'meta');
      // the open view's stream is fresher than this poll
      const state = view && view.id === s.id && view.state ? view.state
        : s.live ? (s.state || 'idle') : 'not live';
      meta.appendChild(el('span', 'badge ' + state.replace(' ', '-'), state));
      meta.appendChild(el('span', 'cost', money(s.cost)));
      meta.appendChild(el('span', 'id', s.id.slice(0, 8)));
      li.appendChild(meta);
      li.addEventListener('click', () => select(s.id));
      ul.appendChild(li);
    }
    if (view) {
      const cur = sessions.find((x) => x.id === view.id);
      if (cur && cur.title) view.setTitle(cur.title);
    }
    if (!view || view.mode !== 'stream') setConn('live', 'connected');
    return true;
  }

  // The sidebar entry of one session, changed in place (between polls).
  function listEntry(id) {
    for (const li of $('sessions').children) if (li.dataset.id === id) return li;
    return null;
  }

  // A session's title as the runtime makes it: its first input's first line, 80 characters.
  function titleOf(text) {
    const line = String(text || '').replace(/^\s+/, '').split('\n')[0];
    return Array.from(line).slice(0, 80).join('');
  }

  function scheduleList() {
    clearTimeout(listTimer);
    listTimer = setTimeout(async () => { await refreshList(); scheduleList(); }, 3000);
  }

  // ---- a session view ----

  class View {
    constructor(id) {
      this.id = id;
      this.lastSeq = 0;       // the last enduring seq shown
      this.ctrl = null;
      this.closed = false;
      this.retry = 0;
      this.connects = 0;
      this.mode = 'stream';
      this.conn = 'connecting';
      this.turns = new Map();  // turn_id -> { el, body }
      this.steps = new Map();  // step_id -> { el, blocks: Map(index -> block) }
      this.calls = new Map();  // call_id -> tool card
      this.gates = new Map();  // gate_id -> card
      this.inputs = new Map(); // input_id -> card (an MCP server's question)
      this.gateOfCall = new Map(); // call_id -> gate card: drawn in that call's card
      this.inputsOfCall = new Map(); // call_id -> question cards: drawn in that call's card
      this.requests = new Map(); // gate_id -> PermissionRequested
      this.resumable = new Set(); // loops with a turn a crash or a shutdown cut (RestoreDone)
      this.log = $('log');
      this.log.textContent = '';
    }

    close() {
      this.closed = true;
      if (this.ctrl) this.ctrl.abort();
    }

    // Resolves once the event stream is open (or after ms, or when closed).
    whenLive(ms) {
      if (this.conn === 'live' || this.closed) return Promise.resolve();
      return new Promise((resolve) => {
        this.liveWaiters = (this.liveWaiters || []).concat([resolve]);
        setTimeout(resolve, ms);
      });
    }

    // Cuts the stream as a network failure would: the view reconnects.
    drop() {
      if (this.ctrl) this.ctrl.abort();
    }

    setState(state) {
      const b = $('view-state');
      b.className = 'badge ' + state.replace(' ', '-');
      b.textContent = state;
      $('interrupt').disabled = !(state === 'running' || state === 'waiting_on_gate');
      if (state === 'connecting') return;
      this.state = state;
      const li = listEntry(this.id);
      const badge = li && li.querySelector('.badge');
      if (badge) {
        badge.className = 'badge ' + state.replace(' ', '-');
        badge.textContent = state;
      }
    }

    // The header and the sidebar say the session's title once it has one
    // (its first input), never its id.
    setTitle(title) {
      if (!title) return;
      this.title = title;
      $('view-title').textContent = title;
      const li = listEntry(this.id);
      const t = li && li.querySelector('.title');
      if (t) t.textContent = title;
    }

    async connect() {
      if (this.closed) return;
      const ctrl = new AbortController();
      this.ctrl = ctrl;
      const h = headers({ Accept: 'text/event-stream' });
      let url = '/v1/sessions/' + encodeURIComponent(this.id) + '/events';
      if (this.lastSeq > 0) h['Last-Event-ID'] = String(this.lastSeq);
      else url += '?from=0';
      this.connects++;
      let failed = null;
      try {
        const resp = await fetch(url, { headers: h, signal: ctrl.signal, cache: 'no-store' });
        if (resp.status === 401) { askToken(token ? 'the token was refused' : ''); return; }
        if (resp.status === 409 || resp.status === 404) {
          let data = null;
          try { data = await resp.json(); } catch (e) { data = null; }
          const code = data && data.error && data.error.code;
          if (code === 'session_not_live') return this.showJournal();
          flash(data && data.error ? data.error.message : 'HTTP ' + resp.status);
          return;
        }
        if (!resp.ok || !resp.body) throw new Error('HTTP ' + resp.status);
        this.conn = 'live';
        setConn('live', 'streaming');
        this.retry = 0;
        for (const w of this.liveWaiters || []) w();
        this.liveWaiters = [];
        await this.read(resp.body.getReader());
      } catch (e) {
        failed = e;
      }
      if (this.closed) return;
      // the stream ended or broke: resume after the last seq we have
      this.conn = 'reconnecting';
      setConn('reconnecting', 'reconnecting');
      this.retry++;
      const delay = Math.min(5000, 200 * Math.pow(2, Math.min(this.retry, 5)));
      if (failed && !(failed.name === 'AbortError')) console.warn('luarig: stream:', failed);
      setTimeout(() => this.connect(), delay);
    }

    // Server-sent events over a fetch() body: blocks end with a blank line;
    // fields event, id, data (lines joined); ':' starts a comment.
    async read(reader) {
      const dec = new TextDecoder();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        buf += dec.decode(value, { stream: true }).replace(/\r\n?/g, '\n');
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          let event = 'message', id = null;
          const data = [];
          for (const line of block.split('\n')) {
            if (line === '' || line[0] === ':') continue;
            const c = line.indexOf(':');
            const field = c < 0 ? line : line.slice(0, c);
            let v = c < 0 ? '' : line.slice(c + 1);
            if (v[0] === ' ') v = v.slice(1);
            if (field === 'event') event = v;
            else if (field === 'id') id = v;
            else if (field === 'data') data.push(v);
          }
          if (data.length) this.message(event, id, data.join('\n'));
        }
      }
    }

    message(event, id, data) {
      let ev;
      try { ev = JSON.parse(data); } catch (e) { return; }
      if (event === 'enduring' && id !== null) {
        const seq = Number(id);
        if (!(seq > this.lastSeq)) return; // seen already
        this.lastSeq = seq;
      }
      this.apply(ev);
    }

    // A session that is not live: its journal, read-only, and a restore button.
    async showJournal() {
      this.mode = 'journal';
      $('restore').hidden = false;
      this.setState('not live');
      setConn('live', 'connected');
      let from = this.lastSeq + 1;
      for (;;) {
        let page;
        try {
          page = await api('GET', '/v1/sessions/' + encodeURIComponent(this.id) + '/journal?limit=500&from=' + from);
        } catch (e) { if (!(e instanceof AuthError)) flash(e.message); return; }
        if (this.closed) return;
        for (const rec of page.events) {
          if (rec.kind === 'event' && rec.seq > this.lastSeq) {
            this.lastSeq = rec.seq;
            this.apply(rec.event);
          }
        }
        if (page.done || !page.events.length) break;
        from = page.next_seq;
      }
    }

    near() {
      return this.log.scrollHeight - this.log.scrollTop - this.log.clientHeight < 80;
    }

    turn(id) {
      let t = this.turns.get(id);
      if (!t) {
        const e = el('div', 'turn');
        e.dataset.turn = id || '';
        this.log.appendChild(e);
        t = { el: e };
        this.turns.set(id, t);
      }
      return t;
    }

    step(ev) {
      let s = this.steps.get(ev.step_id);
      if (!s) {
        // the step's content (what StepDone replaces), then its gate cards
        const e = el('div', 'step');
        e.dataset.step = ev.step_id;
        const content = e.appendChild(el('div', 'content'));
        this.turn(ev.turn_id).el.appendChild(e);
        s = { el: content, box: e, blocks: new Map() };
        this.steps.set(ev.step_id, s);
      }
      return s;
    }

    toolCard(name, id, input) {
      const card = el('div', 'tool');
      card.dataset.call = id || '';
      const head = el('div', 'head');
      head.appendChild(el('span', 'name', name || 'tool'));
      card.args = head.appendChild(el('span', 'args', input === undefined ? '' : summarize(input)));
      card.status = head.appendChild(el('span', 'status', ''));
      card.appendChild(head);
      if (id) this.calls.set(id, card);
      // the gate that asked about this call: under the call, above its result
      const gate = id && this.gateOfCall.get(id);
      if (gate) card.appendChild(gate);
      // and the questions its server asked meanwhile (MCP elicitation)
      for (const q of (id && this.inputsOfCall.get(id)) || []) card.appendChild(q);
      return card;
    }

    setResult(card, text, isError) {
      let r = card.querySelector('.result');
      if (!r) r = card.appendChild(el('div', 'result'));
      r.textContent = summarize(text, 600);
      r.classList.toggle('error', !!isError);
      card.status.textContent = isError ? 'error' : 'done';
    }

    delta(ev) {
      const d = ev.delta || {};
      const s = this.step(ev);
      let b = s.blocks.get(d.index);
      if (d.type === 'text' || d.type === 'thinking') {
        if (!b) {
          b = s.el.appendChild(el('div', (d.type === 'text' ? 'text' : 'thinking') + ' streaming', ''));
          s.blocks.set(d.index, b);
        }
        b.textContent += (d.type === 'text' ? d.text : d.thinking) || '';
      } else if (d.type === 'tool_use') {
        if (!b) {
          b = s.el.appendChild(this.toolCard(d.name, d.id));
          b.json = '';
          s.blocks.set(d.index, b);
        }
        if (d.input_json) {
          b.json += d.input_json;
          b.args.textContent = summarize(b.json);
        }
      }
    }

    // StepDone: the step as journaled replaces whatever the deltas drew.
    stepDone(ev) {
      const s = this.step(ev);
      s.el.textContent = '';
      s.blocks.clear();
      const results = new Map();
      const rc = ev.results && ev.results.content;
      for (const r of Array.isArray(rc) ? rc : []) {
        if (r && r.type === 'tool_result') results.set(r.tool_use_id, r);
      }
      const content = ev.message && ev.message.content;
      for (const blk of Array.isArray(content) ? content : []) {
        if (blk.type === 'text') {
          s.el.appendChild(el('div', 'text', blk.text));
        } else if (blk.type === 'thinking') {
          if (blk.thinking) s.el.appendChild(el('div', 'thinking', blk.thinking));
        } else if (blk.type === 'tool_use') {
          const card = s.el.appendChild(this.toolCard(blk.name, blk.id, blk.input));
          const r = results.get(blk.id);
          if (r) {
            let text = r.content;
            if (Array.isArray(text)) text = text.map((x) => (x && x.text) || '').join('');
            this.setResult(card, text, r.is_error);
          }
        } else if (blk.type === 'refusal') {
          s.el.appendChild(el('div', 'error', 'refused: ' + (blk.text || blk.refusal || '')));
        }
      }
    }

    gateOpened(ev) {
      const req = this.requests.get(ev.gate_id) || {};
      const card = el('div', 'gate');
      card.dataset.gate = ev.gate_id;
      card.appendChild(el('div', 'what', 'Gate: ' + (ev.tool || 'a tool') + ' asks for permission' +
        (ev.summary ? ' — ' + ev.summary : '')));
      const unmet = Array.isArray(req.unmet) ? req.unmet : [];
      if (unmet.length) {
        const ul = card.appendChild(el('ul'));
        for (const u of unmet) ul.appendChild(el('li', null, u.kind + ' ' + (u.scope || u.match || '')));
      }
      const actions = card.appendChild(el('div', 'actions'));
      const labels = [['approve', 'Approve'], ['approve_always', 'Approve always'], ['deny', 'Deny']];
      for (const [action, label] of labels) {
        const b = actions.appendChild(el('button', action.replace('_', '-'), label));
        b.type = 'button';
        b.dataset.action = action;
        // what "always" saves (a delegation gate: allow delegate NAME)
        if (action === 'approve_always' && Array.isArray(req.candidates) && req.candidates.length) {
          b.title = 'saves ' + req.candidates.map((c) => c.effect + ' ' + c.kind + ' ' + c.match).join('; ');
        }
        b.addEventListener('click', () => this.answer(ev.gate_id, action, card));
      }
      // in the card of the call it gates (a replay draws that card at StepDone,
      // which moves the gate into it), else at the end of its step or turn
      const call = ev.call_id && this.calls.get(ev.call_id);
      if (ev.call_id) this.gateOfCall.set(ev.call_id, card);
      if (call && call.isConnected) call.insertBefore(card, call.querySelector('.result'));
      else if (ev.step_id) this.step(ev).box.appendChild(card);
      else this.turn(ev.turn_id).el.appendChild(card);
      this.gates.set(ev.gate_id, card);
      this.setState('waiting_on_gate');
    }

    // An MCP server's question (elicitation) within a tool call: one field per
    // property of its schema, filled with the defaults; Accept sends them.
    inputRequested(ev) {
      const card = el('div', 'gate question');
      card.dataset.input = ev.input_id;
      card.appendChild(el('div', 'what', (ev.server || 'A server') + ' asks: ' + (ev.message || '')));
      const props = (ev.schema && typeof ev.schema.properties === 'object') ? ev.schema.properties : {};
      const fields = {};
      for (const name of Object.keys(props).sort()) {
        const p = props[name] || {};
        const row = card.appendChild(el('label', 'field'));
        row.appendChild(el('span', 'name', (p.title || name) + (p.description ? ' — ' + p.description : '')));
        // the choices of an enum: plain (enum), titled (oneOf/anyOf of const + title)
        // or the legacy enumNames beside enum (SEP-1330)
        const choices = (q) => {
          if (!q) return null;
          if (Array.isArray(q.enum)) {
            return q.enum.map((v, i) => [String(v), Array.isArray(q.enumNames) && q.enumNames[i] ? q.enumNames[i] : String(v)]);
          }
          const alts = q.oneOf || q.anyOf;
          if (Array.isArray(alts) && alts.every((a) => a && a.const !== undefined)) {
            return alts.map((a) => [String(a.const), a.title || String(a.const)]);
          }
          return null;
        };
        let input;
        const single = choices(p);
        const multi = p.type === 'array' ? choices(p.items) : null;
        if (multi) {
          // a multi-select: one box per choice
          input = el('span', 'choices');
          input.name = name;
          for (const [v, label] of multi) {
            const l = input.appendChild(el('label', 'choice'));
            const box = l.appendChild(document.createElement('input'));
            box.type = 'checkbox';
            box.value = v;
            box.dataset.field = name;
            if (Array.isArray(p.default) && p.default.map(String).includes(v)) box.checked = true;
            l.appendChild(document.createTextNode(' ' + label));
          }
          row.appendChild(input);
          fields[name] = { input, type: 'array' };
          continue;
        }
        if (single) {
          input = document.createElement('select');
          for (const [v, label] of single) {
            const o = input.appendChild(document.createElement('option'));
            o.value = v; o.textContent = label;
          }
        } else {
          input = document.createElement('input');
          input.type = p.type === 'boolean' ? 'checkbox' : (p.type === 'number' || p.type === 'integer') ? 'number' : 'text';
        }
        input.name = name;
        if (p.default !== undefined) {
          if (input.type === 'checkbox') input.checked = !!p.default; else input.value = String(p.default);
        }
        row.appendChild(input);
        fields[name] = { input, type: p.type };
      }
      const actions = card.appendChild(el('div', 'actions'));
      for (const [action, label, cls] of [['accept', 'Accept', 'approve'], ['decline', 'Decline', 'deny'], ['cancel', 'Cancel', 'cancel']]) {
        const b = actions.appendChild(el('button', cls, label));
        b.type = 'button';
        b.dataset.action = action;
        b.addEventListener('click', () => {
          const content = {};
          if (action === 'accept') {
            for (const [name, f] of Object.entries(fields)) {
              if (f.type === 'array') {
                content[name] = [...f.input.querySelectorAll('input[type=checkbox]')].filter((b) => b.checked).map((b) => b.value);
              } else if (f.input.type === 'checkbox') content[name] = f.input.checked;
              else if (f.type === 'integer') content[name] = parseInt(f.input.value, 10);
              else if (f.type === 'number') content[name] = Number(f.input.value);
              else content[name] = f.input.value;
            }
          }
          this.respond(ev.input_id, action, content, card);
        });
      }
      const call = ev.call_id && this.calls.get(ev.call_id);
      if (ev.call_id) {
        const list = this.inputsOfCall.get(ev.call_id) || [];
        list.push(card);
        this.inputsOfCall.set(ev.call_id, list);
      }
      if (call && call.isConnected) call.insertBefore(card, call.querySelector('.result'));
      else if (ev.step_id) this.step(ev).box.appendChild(card);
      else this.turn(ev.turn_id).el.appendChild(card);
      this.inputs.set(ev.input_id, card);
    }

    async respond(inputId, action, content, card) {
      for (const b of card.querySelectorAll('button')) b.disabled = true;
      try {
        await api('POST', '/v1/sessions/' + encodeURIComponent(this.id) + '/inputs/' +
          encodeURIComponent(inputId), action === 'accept' ? { action, content } : { action });
      } catch (e) {
        if (e instanceof AuthError) return;
        if (e.code !== 'input_not_open') {
          for (const b of card.querySelectorAll('button')) b.disabled = false;
        }
        flash('question ' + inputId + ': ' + e.message);
      }
    }

    inputResolved(ev) {
      const card = this.inputs.get(ev.input_id);
      if (!card) return;
      card.classList.add('resolved');
      const actions = card.querySelector('.actions');
      if (actions) actions.remove();
      for (const i of card.querySelectorAll('input, select')) i.disabled = true;
      const words = { accept: 'answered', decline: 'declined', cancel: 'cancelled' };
      card.appendChild(el('div', 'outcome', (words[ev.action] || ev.action) +
        (ev.source && ev.source !== 'user' ? ' (' + ev.source + ')' : '')));
      this.inputs.delete(ev.input_id);
    }

    async answer(gateId, action, card) {
      for (const b of card.querySelectorAll('button')) b.disabled = true;
      try {
        await api('POST', '/v1/sessions/' + encodeURIComponent(this.id) + '/gates/' +
          encodeURIComponent(gateId), { action });
      } catch (e) {
        if (e instanceof AuthError) return;
        if (e.code !== 'gate_not_open') {
          for (const b of card.querySelectorAll('button')) b.disabled = false;
        }
        flash('gate ' + gateId + ': ' + e.message);
      }
    }

    gateResolved(ev) {
      const card = this.gates.get(ev.gate_id);
      if (!card) return;
      card.classList.add('resolved');
      const actions = card.querySelector('.actions');
      if (actions) actions.remove();
      const words = { approve: 'approved', approve_always: 'approved always', deny: 'denied' };
      card.appendChild(el('div', 'outcome', (words[ev.action] || ev.action) +
        (ev.source && ev.source !== 'user' ? ' (' + ev.source + ')' : '')));
      this.gates.delete(ev.gate_id);
      if (this.gates.size === 0) this.setState('running');
    }

    turnEnd(ev, cls, text) {
      const t = this.turn(ev.turn_id);
      t.el.appendChild(el('div', cls, text));
    }

    usage(u) {
      if (!u) return '';
      let s = (u.input_tokens || 0) + ' in / ' + (u.output_tokens || 0) + ' out tokens';
      if (u.cache_read_tokens) s += ', ' + u.cache_read_tokens + ' cached';
      if (typeof u.cost === 'number') s += ', ' + money(u.cost);
      return s;
    }

    apply(ev) {
      const stick = this.near();
      switch (ev.type) {
      case 'TurnStarted': {
        const t = this.turn(ev.turn_id);
        const blocks = (ev.message && ev.message.content) || [];
        const text = blocks.map((b) => (b.type === 'text' ? b.text
          : '[' + b.type + (b.name ? ' ' + b.name : '') + (b.media_type ? ', ' + b.media_type : '') + ']')).join('\n');
        t.el.insertBefore(el('div', 'user', text), t.el.firstChild);
        this.setState('running');
        if (!this.title) {
          const first = blocks.find((b) => b.type === 'text');
          if (first) this.setTitle(titleOf(first.text));
        }
        break;
      }
      case 'TurnResumed':
        this.turn(ev.turn_id).el.appendChild(el('div', 'note', 'turn resumed (it was cut: ' + (ev.resumes || '') + ')'));
        this.setState('running');
        break;
      case 'TokenDelta': this.delta(ev); break;
      case 'StepDone': this.stepDone(ev); break;
      case 'ToolCallStarted': {
        const c = this.calls.get(ev.call_id);
        if (c) c.status.textContent = 'running…';
        break;
      }
      case 'ToolCallCompleted': {
        const c = this.calls.get(ev.call_id);
        if (c) this.setResult(c, ev.preview, ev.is_error);
        break;
      }
      case 'PermissionRequested': this.requests.set(ev.gate_id, ev); break;
      case 'PermissionDecided':
        if (ev.verdict && ev.verdict !== 'allow') {
          this.turnEnd(ev, 'note', (ev.tool || 'tool') + ': ' + ev.verdict + (ev.reason ? ' — ' + ev.reason : ''));
        }
        break;
      case 'GateOpened': this.gateOpened(ev); break;
      case 'GateResolved': this.gateResolved(ev); break;
      case 'UserInputRequested': this.inputRequested(ev); break;
      case 'UserInputResolved': this.inputResolved(ev); break;
      case 'TurnDone':
        this.turnEnd(ev, 'turn-end', 'turn done · ' + this.usage(ev.usage));
        break;
      case 'TurnFailed': {
        const e = ev.error || {};
        this.turnEnd(ev, 'error', 'turn failed: ' + (e.code || 'error') + ': ' + (e.message || ''));
        break;
      }
      case 'TurnInterrupted':
        for (const b of this.turn(ev.turn_id).el.querySelectorAll('.streaming')) b.classList.remove('streaming');
        this.turnEnd(ev, 'note', 'turn interrupted');
        break;
      case 'TurnRejected': this.turnEnd(ev, 'error', 'input rejected: ' + summarize(ev.error || ev.reason || '')); break;
      case 'InputCancelled': this.log.appendChild(el('div', 'note', 'queued input cancelled')); break;
      case 'SessionActive': this.setState('running'); break;
      case 'SessionIdle': this.setState('idle'); break;
      case 'SessionStopped': this.log.appendChild(el('div', 'note', 'session stopped')); break;
      case 'RestoreDone':
        this.log.appendChild(el('div', 'note', 'session restored'));
        this.resumable = new Set(ev.resumable || []);
        break;
      case 'RestoreErrored': this.log.appendChild(el('div', 'error', 'restore failed: ' + (ev.reason || ''))); break;
      case 'CompactionCommitted': this.log.appendChild(el('div', 'note', 'context compacted')); break;
      case 'GuardrailTripped':
        this.log.appendChild(el('div', 'note error-text', 'guardrail ' + ev.guardrail + ' tripped on the ' +
          ev.stage + (ev.reason ? ': ' + ev.reason : '')));
        break;
      case 'ActiveLoopChanged':
        if (ev.from !== ev.to) {
          this.log.appendChild(el('div', 'note', ev.from + ' hands the conversation to ' + ev.to +
            (ev.reason && ev.reason !== 'handoff' ? ' (' + ev.reason + ')' : '')));
        }
        break;
      case 'HookDecided':
        if (ev.action === 'deny' || ev.action === 'rewrite' || ev.action === 'error') {
          this.log.appendChild(el('div', 'note', 'hook ' + ev.hook + ': ' + ev.action +
            (ev.tool ? ' ' + ev.tool : '') + (ev.message ? ' — ' + ev.message : '')));
        }
        break;
      default: break;
      }
      // Resume: a cut turn is waiting (a new or resumed turn on its loop ends that)
      if (ev.type === 'TurnStarted' || ev.type === 'TurnResumed') this.resumable.delete(ev.loop_id);
      if (ev.type === 'SessionStopped') this.resumable.clear();
      $('resume').hidden = this.mode === 'journal' || this.resumable.size === 0;
      if (stick) this.log.scrollTop = this.log.scrollHeight;
    }
  }

  function select(id, title) {
    if (view && view.id === id) return;
    closeFlowView();
    if (view) view.close();
    $('restore').hidden = true;
    $('resume').hidden = true;
    view = new View(id);
    const s = sessions.find((x) => x.id === id);
    $('view-title').textContent = (s && s.title) || title || id;
    $('view-title').title = id;
    if ((s && s.title) || title) view.setTitle((s && s.title) || title);
    view.setState('connecting');
    if (location.hash !== '#' + id) history.replaceState(null, '', '#' + id);
    for (const li of $('sessions').children) li.classList.toggle('current', li.dataset.id === id);
    view.connect();
  }

  // A session is created when its first input is sent, so none is left
  // empty and its title is that input. It is created, its stream opened,
  // then the input sent: text streams only to a subscriber that was there
  // when the step began (POST /v1/sessions {text} would start the turn first).
  async function newSession(text, body) {
    const r = await api('POST', '/v1/sessions', {});
    select(r.session_id, titleOf(text));
    const v = view;
    await v.whenLive(3000);
    await api('POST', '/v1/sessions/' + encodeURIComponent(r.session_id) + '/input', body);
    await refreshList();
    return r;
  }

  // "New session" creates nothing: it clears the view for a first message.
  $('new-session').addEventListener('click', () => {
    closeFlowView();
    if (view) view.close();
    view = null;
    $('restore').hidden = true;
    const log = $('log');
    log.textContent = '';
    log.appendChild(el('div', 'note', 'A new session starts with the first message you send.'));
    $('view-title').textContent = 'new session';
    $('view-title').title = '';
    const b = $('view-state');
    b.className = 'badge';
    b.textContent = '';
    $('interrupt').disabled = true;
    if (location.hash) history.replaceState(null, '', location.pathname + location.search);
    for (const li of $('sessions').children) li.classList.remove('current');
    $('input').focus();
  });

  // Attached files go as image or document blocks, their bytes in base64
  // (the server checks their type by the bytes and stores each once).
  function base64Of(buf) {
    const bytes = new Uint8Array(buf);
    let s = '';
    for (let i = 0; i < bytes.length; i += 0x8000) {
      s += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
    }
    return btoa(s);
  }

  async function mediaBlocks(files) {
    const out = [];
    for (const f of files) {
      const block = { type: f.type.startsWith('image/') ? 'image' : 'document',
                      base64: base64Of(await f.arrayBuffer()), name: f.name };
      if (f.type) block.media_type = f.type;
      out.push(block);
    }
    return out;
  }

  $('attach').addEventListener('change', () => {
    const names = [...$('attach').files].map((f) => f.name);
    $('attached').textContent = names.join(', ');
    $('attached').title = names.join('\n');
  });

  $('composer').addEventListener('submit', async (e) => {
    e.preventDefault();
    const text = $('input').value;
    const files = [...$('attach').files];
    if (!text.trim() && !files.length) return;
    $('send').disabled = true;
    try {
      let body = { text };
      if (files.length) {
        const blocks = text.trim() ? [{ type: 'text', text }] : [];
        body = { blocks: blocks.concat(await mediaBlocks(files)) };
      }
      if (!view) {
        await newSession(text || files[0].name, body);
      } else {
        await api('POST', '/v1/sessions/' + encodeURIComponent(view.id) + '/input', body);
      }
      $('input').value = '';
      $('attach').value = '';
      $('attached').textContent = '';
    } catch (err) {
      if (!(err instanceof AuthError)) flash(err.message);
    } finally {
      $('send').disabled = false;
    }
    refreshList();
  });

  $('input').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      $('composer').requestSubmit();
    }
  });

  $('interrupt').addEventListener('click', async () => {
    if (!view) return;
    try {
      const r = await api('POST', '/v1/sessions/' + encodeURIComponent(view.id) + '/interrupt');
      if (!r.interrupted) view.log.appendChild(el('div', 'note', 'nothing to interrupt'));
    } catch (e) { if (!(e instanceof AuthError)) flash(e.message); }
  });

  $('resume').addEventListener('click', async () => {
    if (!view) return;
    try {
      await api('POST', '/v1/sessions/' + encodeURIComponent(view.id) + '/resume');
    } catch (e) { if (!(e instanceof AuthError)) flash(e.message); }
  });

  $('restore').addEventListener('click', async () => {
    if (!view) return;
    const id = view.id;
    try {
      await api('POST', '/v1/sessions/' + encodeURIComponent(id) + '/restore');
    } catch (e) { if (!(e instanceof AuthError)) flash(e.message); return; }
    view.close();
    view = null;
    await refreshList();
    select(id);
  });

  async function start() {
    if (!(await refreshList())) return;
    scheduleList();
    refreshFlows().then(scheduleFlows);
    const id = decodeURIComponent(location.hash.slice(1));
    // (after a new token, a view whose stream was refused starts again)
    if (view && view.conn !== 'live' && view.mode === 'stream') {
      view.close();
      view = null;
    }
    if (id && (!view || view.id !== id)) select(id);
  }

  // ---- flow runs (rig.flow; the server's /v1/flows routes, when it serves flows) ----

  let flowView = null; // { flow, id, timer }
  let flowTimer = null;
  const SVGNS = 'http://www.w3.org/2000/svg';

  function svg(tag, attrs) {
    const e = document.createElementNS(SVGNS, tag);
    for (const k of Object.keys(attrs || {})) e.setAttribute(k, attrs[k]);
    return e;
  }

  async function refreshFlows() {
    let flows;
    try {
      flows = (await api('GET', '/v1/flows')).flows || [];
    } catch (e) {
      return; // no flows served (404), or the server is away: the session list says so
    }
    const ul = $('flows');
    const rows = [];
    for (const f of flows) {
      try {
        for (const r of (await api('GET', '/v1/flows/' + encodeURIComponent(f.name) + '/runs')).runs || []) {
          rows.push(Object.assign({ flowName: f.name }, r));
        }
      } catch (e) { /* the next poll tries again */ }
    }
    $('flows-head').hidden = flows.length === 0;
    ul.hidden = flows.length === 0;
    ul.textContent = '';
    for (const r of rows) {
      const li = el('li');
      li.dataset.id = r.id;
      if (flowView && flowView.id === r.id) li.classList.add('current');
      li.appendChild(el('span', 'title', r.flowName));
      li.appendChild(el('span', 'badge ' + (r.status || ''), r.status || '?'));
      li.appendChild(el('span', 'id', r.id.slice(0, 8)));
      li.addEventListener('click', () => openFlowRun(r.flowName, r.id));
      ul.appendChild(li);
    }
  }

  function scheduleFlows() {
    clearTimeout(flowTimer);
    flowTimer = setTimeout(async () => { await refreshFlows(); scheduleFlows(); }, 3000);
  }

  function closeFlowView() {
    if (flowView) clearTimeout(flowView.timer);
    flowView = null;
    for (const li of $('flows').children) li.classList.remove('current');
  }

  // Layers by distance from start (edges back to an earlier layer stay drawn).
  function drawGraph(g) {
    const layer = new Map([['start', 0]]);
    const queue = ['start'];
    while (queue.length) {
      const v = queue.shift();
      for (const e of g.edges) {
        if (e.from === v && !layer.has(e.to)) { layer.set(e.to, layer.get(v) + 1); queue.push(e.to); }
      }
    }
    let deepest = 0;
    for (const v of g.vertices) { if (!layer.has(v)) layer.set(v, 1); deepest = Math.max(deepest, layer.get(v)); }
    layer.set('end', Math.max(deepest + 1, layer.get('end') || 0));
    const rows = new Map();
    for (const [v, l] of layer) { if (!rows.has(l)) rows.set(l, []); rows.get(l).push(v); }
    const W = 120, H = 30, GX = 30, GY = 50;
    let cols = 1;
    for (const r of rows.values()) cols = Math.max(cols, r.length);
    const pos = new Map();
    for (const [l, vs] of rows) {
      vs.forEach((v, i) => pos.set(v, { x: 10 + i * (W + GX) + (cols - vs.length) * (W + GX) / 2, y: 10 + l * (H + GY) }));
    }
    const width = 80 + cols * (W + GX), height = 20 + (layer.get('end') + 1) * (H + GY);
    const root = svg('svg', { width, height, viewBox: '0 0 ' + width + ' ' + height, role: 'img' });
    const defs = svg('defs');
    const m = svg('marker', { id: 'arrow', markerWidth: 8, markerHeight: 8, refX: 7, refY: 4, orient: 'auto' });
    m.appendChild(svg('path', { d: 'M0,0 L8,4 L0,8 z', fill: '#52606d' }));
    defs.appendChild(m);
    root.appendChild(defs);
    for (const e of g.edges) {
      const a = pos.get(e.from), b = pos.get(e.to);
      if (!a || !b) continue;
      const cls = e.conditional ? 'conditional' : '';
      if (layer.get(e.to) > layer.get(e.from)) {
        root.appendChild(svg('line', { x1: a.x + W / 2, y1: a.y + H, x2: b.x + W / 2, y2: b.y,
          class: cls, 'marker-end': 'url(#arrow)' }));
      } else {
        // back to an earlier layer (or a vertex to itself): a curve on the right
        const bend = 45 + 12 * (layer.get(e.from) - layer.get(e.to));
        root.appendChild(svg('path', { d: 'M' + (a.x + W) + ',' + (a.y + H / 2) + ' C' + (a.x + W + bend) + ',' +
          (a.y + H / 2) + ' ' + (b.x + W + bend) + ',' + (b.y + H / 2) + ' ' + (b.x + W) + ',' + (b.y + H / 2),
          class: 'back ' + cls, fill: 'none', 'marker-end': 'url(#arrow)' }));
      }
    }
    const pending = new Set(g.pending || []);
    for (const [v, p] of pos) {
      const node = svg('g', { class: 'vertex' + (pending.has(v) ? ' current' : '') +
        (v === 'start' || v === 'end' ? ' terminal' : ''), 'data-vertex': v });
      node.appendChild(svg('rect', { x: p.x, y: p.y, width: W, height: H, rx: 6 }));
      const t = svg('text', { x: p.x + W / 2, y: p.y + H / 2 + 4, 'text-anchor': 'middle' });
      t.textContent = v;
      node.appendChild(t);
      root.appendChild(node);
    }
    return root;
  }

  async function showFlowRun(fv) {
    const base = '/v1/flows/' + encodeURIComponent(fv.flow) + '/runs/' + encodeURIComponent(fv.id);
    let st, g;
    try {
      st = await api('GET', base + '/status');
      g = await api('GET', '/v1/flows/' + encodeURIComponent(fv.flow) + '/graph?format=json&run=' +
        encodeURIComponent(fv.id));
    } catch (e) {
      if (!(e instanceof AuthError)) flash(e.message);
      return;
    }
    if (flowView !== fv) return;
    const b = $('view-state');
    b.className = 'badge ' + st.status;
    b.textContent = st.status;
    for (const li of $('flows').children) {
      const lb = li.dataset.id === fv.id && li.querySelector('.badge');
      if (lb) { lb.className = 'badge ' + st.status; lb.textContent = st.status; }
    }
    const log = $('log');
    const key = JSON.stringify([st.status, st.step, g.pending, st.interrupts.map((i) => i.key)]);
    if (fv.drawn === key) return;
    fv.drawn = key;
    log.textContent = '';
    log.appendChild(el('div', 'note', 'flow ' + fv.flow + ' · run ' + fv.id + ' · step ' + st.step +
      (st.forked_from ? ' · forked from ' + st.forked_from.run.slice(0, 8) + ' at step ' + st.forked_from.step : '')));
    const box = el('div', 'flow-graph');
    box.appendChild(drawGraph(g));
    log.appendChild(box);
    for (const it of st.interrupts || []) {
      const card = el('div', 'gate question');
      card.appendChild(el('div', 'what', 'interrupt at ' + it.vertex + ': ' + summarize(it.value, 400)));
      const input = el('input');
      input.type = 'text';
      input.className = 'answer';
      input.placeholder = 'answer (JSON, or text)';
      const send = el('button', 'approve', 'Answer');
      send.type = 'button';
      send.addEventListener('click', async () => {
        let v = input.value;
        try { v = JSON.parse(v); } catch (e) { /* text */ }
        send.disabled = true;
        try {
          await api('POST', base + '/resume', { value: v, key: it.key });
          card.classList.add('resolved');
        } catch (e) { if (!(e instanceof AuthError)) flash(e.message); send.disabled = false; }
        fv.drawn = null;
      });
      const actions = el('div', 'actions');
      actions.appendChild(input);
      actions.appendChild(send);
      card.appendChild(actions);
      log.appendChild(card);
    }
    if (st.status === 'done') log.appendChild(el('div', 'turn-end', 'output ' + summarize(st.output, 600)));
    if (st.status === 'failed') log.appendChild(el('div', 'error', 'failed: ' + (st.error || '')));
    const vals = el('div', 'flow-values', 'values ' + summarize(st.values, 2000));
    log.appendChild(vals);
  }

  function openFlowRun(flow, id) {
    if (view) view.close();
    view = null;
    for (const li of $('sessions').children) li.classList.remove('current');
    closeFlowView();
    const fv = { flow, id };
    flowView = fv;
    for (const li of $('flows').children) li.classList.toggle('current', li.dataset.id === id);
    $('view-title').textContent = 'flow run ' + id.slice(0, 8) + ' (' + flow + ')';
    $('view-title').title = id;
    $('interrupt').disabled = true;
    $('restore').hidden = true;
    $('resume').hidden = true;
    $('log').textContent = '';
    const tick = async () => {
      await showFlowRun(fv);
      if (flowView === fv) fv.timer = setTimeout(tick, 1000);
    };
    tick();
  }

  // for tests and the curious: the open view, and a way to cut its stream
  window.luarigConsole = {
    get view() { return view; },
    get flowView() { return flowView; },
    dropStream() { if (view) view.drop(); },
  };

  start();
})();
