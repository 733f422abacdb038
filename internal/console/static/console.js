/* Sprout's console: fills the server-rendered pages with the admin API's
   figures and makes its changes (see internal/console/doc.go). No
   framework and no build; the DOM is built with textContent only, so a
   tube's name or a job's body is always text. */
(() => {
  'use strict';

  const body = document.body;
  const page = body.dataset.page;
  // read-only (no admin token), session (logged in), bearer (the page was
  // fetched with the token in a header, which fetch() here does not send),
  // login (the form).
  const mode = body.dataset.mode;
  const canChange = mode === 'session';
  const $ = (id) => document.getElementById(id);

  // ---- DOM and formatting helpers --------------------------------------

  function h(tag, props, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v == null || v === false) continue;
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = v;
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? '' : v);
    }
    for (const kid of kids) if (kid != null) e.append(kid);
    return e;
  }

  const numberFormat = new Intl.NumberFormat();
  const compactFormat = new Intl.NumberFormat(undefined, { notation: 'compact', maximumFractionDigits: 1 });
  const rateFormat = new Intl.NumberFormat(undefined, { maximumFractionDigits: 1 });
  const num = (v) => (v == null ? '–' : numberFormat.format(v));
  const rate = (v) => (v == null ? '–' : rateFormat.format(v) + '/s');

  // dur is a number of seconds for people: "45 s", "12 min 5 s", "3 h 20 min".
  function dur(s) {
    if (s == null) return '–';
    s = Math.max(0, Math.round(s));
    const units = [['d', 86400], ['h', 3600], ['min', 60], ['s', 1]];
    const parts = [];
    for (const [name, size] of units) {
      if (s >= size || (name === 's' && parts.length === 0)) {
        parts.push(Math.floor(s / size) + ' ' + name);
        s %= size;
      }
      if (parts.length === 2) break;
    }
    return parts.join(' ');
  }

  const plural = (n, one, many) => num(n) + ' ' + (n === 1 ? one : many);

  // A tube's name is one path segment, as the API wants it ('/' is %2F).
  // "." and ".." cannot be one: browsers fold them, escaped or not.
  const unreachable = (name) => name === '.' || name === '..';
  const tubePath = (name) => '/tubes/' + encodeURIComponent(name);
  const tubeAPI = (name) => '/api/v1' + tubePath(name);

  // ---- Status line (aria-live) -----------------------------------------

  const statusEl = $('status');
  let statusTimer = 0;
  // A fetch cut short by leaving the page is no error worth a word.
  let leaving = false;
  window.addEventListener('pagehide', () => { leaving = true; });
  function say(message, bad) {
    if (leaving) return;
    // An error goes to the browser's console as well, for whoever debugs
    // (and the browser tests, which fail on one they did not expect).
    if (bad) console.error('sprout console: ' + message);
    clearTimeout(statusTimer);
    statusEl.textContent = '';
    statusEl.classList.toggle('bad', !!bad);
    // Emptied first and filled a moment later, so that the same message
    // twice is announced twice.
    setTimeout(() => { statusEl.textContent = message; }, 20);
    statusTimer = setTimeout(() => { statusEl.textContent = ''; }, bad ? 12000 : 6000);
  }

  // ---- The API ---------------------------------------------------------

  class APIError extends Error {
    constructor(status, message) { super(message); this.status = status; }
  }

  let csrf = '';
  let csrfLoaded = null;
  // loadCSRF learns the session's CSRF token: the cookie is HttpOnly, so
  // the session endpoint repeats it.
  function loadCSRF() {
    csrfLoaded ||= api('GET', '/api/v1/session').then((s) => { csrf = s['csrf-token'] || ''; });
    return csrfLoaded;
  }

  async function api(method, path, payload) {
    const headers = { Accept: 'application/json' };
    const init = { method, headers, credentials: 'same-origin', cache: 'no-store' };
    if (payload !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(payload);
    }
    if (method !== 'GET' && path !== '/api/v1/session') {
      await loadCSRF();
      headers['X-CSRF-Token'] = csrf;
    }
    let res;
    try {
      res = await fetch(path, init);
    } catch (e) {
      throw new APIError(0, 'The server does not answer: ' + e.message);
    }
    const text = await res.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch { /* not JSON: said below */ }
    if (res.status === 401 && mode === 'session') {
      // The session ended (expired, logged out elsewhere, a restart): the
      // page itself now answers the login form.
      location.reload();
    }
    if (!res.ok) {
      const why = data && data.error ? data.error.replace(/^admin: /, '') : res.status + ' ' + res.statusText;
      throw new APIError(res.status, why);
    }
    return data;
  }

  // markShown marks, once, when the page first shows the API's figures:
  // what a user waits for, to be read with performance.getEntriesByName.
  function markShown() {
    if (performance.getEntriesByName('console:shown').length === 0) performance.mark('console:shown');
  }

  // every runs fn now and then every ms while the tab is shown; a hidden
  // tab stops, and catches up when shown again. It returns a function that
  // runs fn at once (after an action).
  function every(ms, fn) {
    let timer = 0;
    let running = false;
    let failing = false;
    async function tick() {
      clearTimeout(timer);
      if (document.hidden) return;
      if (!running) {
        running = true;
        try {
          await fn();
          if (failing) say('Connected again.');
          failing = false;
        } catch (e) {
          if (!failing) say(e.message, true);
          failing = true;
        } finally {
          running = false;
        }
      }
      timer = setTimeout(tick, ms);
    }
    document.addEventListener('visibilitychange', () => { if (!document.hidden) tick(); });
    tick();
    return tick;
  }

  // ---- Confirmation ----------------------------------------------------

  // confirmAction asks in the modal dialog, Cancel focused; it resolves to
  // true when the operator confirms. Focus goes back where it was. The
  // answer is taken from the OK button's click, not from the dialog's
  // returnValue at its close event: that event comes a task later, and
  // may come after the dialog was opened again.
  const dialog = $('confirm');
  let settle = null;
  function finish(ok) {
    const resolve = settle;
    settle = null;
    if (resolve) resolve(ok);
  }
  $('confirm-ok').addEventListener('click', () => finish(true));
  dialog.addEventListener('close', () => { if (!dialog.open) finish(false); });

  function confirmAction(title, text, okLabel) {
    finish(false);
    $('confirm-title').textContent = title;
    $('confirm-text').textContent = text;
    $('confirm-ok').textContent = okLabel;
    const opener = document.activeElement;
    return new Promise((resolve) => {
      settle = (ok) => {
        resolve(ok);
        if (opener && document.contains(opener)) opener.focus();
      };
      dialog.showModal();
      $('confirm-cancel').focus();
    });
  }

  // ---- Figures ---------------------------------------------------------

  // figures fills a <dl> with [key, label, value, class] items, keeping
  // its elements so that a live update only changes text.
  function figures(dl, cls, items) {
    dl.items ||= new Map();
    for (const [key, label, value, extra] of items) {
      let item = dl.items.get(key);
      if (!item) {
        item = { box: h('div', {}), dd: h('dd', {}) };
        item.box.append(h('dt', { text: label }), item.dd);
        dl.append(item.box);
        dl.items.set(key, item);
      }
      const want = [cls, extra].filter(Boolean).join(' ');
      if (item.box.className !== want) item.box.className = want;
      if (typeof value === 'string' || typeof value === 'number') {
        const text = String(value);
        if (item.dd.textContent !== text) item.dd.textContent = text;
      } else {
        item.dd.replaceChildren(value);
      }
    }
    dl.removeAttribute('aria-busy');
  }

  // stateCards are the big figures of the server or a tube: its jobs by
  // state (f is stats or stats-tube), and its latest rates (history).
  const stateCards = (f, history) => [
    ['ready', 'Ready', num(f['current-jobs-ready']), 'ready'],
    ['reserved', 'Reserved', num(f['current-jobs-reserved']), 'reserved'],
    ['delayed', 'Delayed', num(f['current-jobs-delayed']), 'delayed'],
    ['buried', 'Buried', num(f['current-jobs-buried']), 'buried'],
    ['urgent', 'Urgent', num(f['current-jobs-urgent'])],
    ['puts', 'Puts', rate(history.latest('puts')), 'puts'],
    ['deletes', 'Deletes', rate(history.latest('deletes')), 'deletes'],
  ];

  // ---- Charts ----------------------------------------------------------

  const css = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  const COUNTS = [['ready', 'Ready', '--ready'], ['reserved', 'Reserved', '--reserved'],
    ['delayed', 'Delayed', '--delayed'], ['buried', 'Buried', '--buried']];
  const RATES = [['puts', 'Puts', '--puts'], ['deletes', 'Deletes', '--deletes']];

  // History holds the last hour of an API history, fetching only what is
  // new (?since=) after the first load.
  class History {
    constructor(path) { this.path = path; this.ts = []; this.series = {}; }
    async load() {
      const last = this.ts[this.ts.length - 1];
      const d = await api('GET', this.path + (last ? '?since=' + last : ''));
      this.ts.push(...d.timestamps);
      for (const [key, points] of Object.entries(d.series)) {
        (this.series[key] ||= []).push(...points);
      }
      const cut = this.ts[this.ts.length - 1] - 3600;
      let drop = 0;
      while (drop < this.ts.length && this.ts[drop] <= cut) drop++;
      if (drop) {
        this.ts.splice(0, drop);
        for (const points of Object.values(this.series)) points.splice(0, drop);
      }
    }
    data(specs) { return [this.ts, ...specs.map(([key]) => this.series[key] || [])]; }
    latest(key) {
      const points = this.series[key] || [];
      for (let i = points.length - 1; i >= 0; i--) if (points[i] != null) return points[i];
      return null;
    }
  }

  class Chart {
    // whole: the values are counts, so the axis has no fractions.
    constructor(el, specs, format, whole) {
      this.el = el;
      this.specs = specs;
      this.note = h('div', { class: 'waiting', text: 'Collecting the first samples…' });
      el.append(this.note);
      if (!window.uPlot) {
        this.note.textContent = 'The chart library did not load.';
        return;
      }
      const axis = {
        stroke: css('--muted'),
        grid: { stroke: css('--grid'), width: 1 },
        ticks: { stroke: css('--grid'), width: 1 },
      };
      this.u = new window.uPlot({
        width: this.width(),
        height: this.height(),
        cursor: { drag: { x: false, y: false } },
        scales: {
          // Always the last hour, so that a short history is seen as one.
          x: { time: true, range: (u, min, max) => { const end = max || Date.now() / 1000; return [end - 3600, end]; } },
          y: { range: (u, min, max) => [0, max > 0 ? max * 1.1 : 1] },
        },
        series: [{}, ...specs.map(([, label, color]) => ({
          label,
          stroke: css(color),
          width: 2,
          points: { show: false },
          // The legend shows the values under the cursor, and only
          // the names without one.
          value: (u, v) => (v == null ? '' : format(v)),
        }))],
        axes: [axis, {
          ...axis,
          size: 48,
          incrs: whole ? [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 2e5, 5e5, 1e6, 2e6, 5e6, 1e7, 1e8, 1e9] : undefined,
          values: (u, vals) => vals.map((v) => compactFormat.format(v)),
        }],
      }, [[], ...specs.map(() => [])], el);
      new ResizeObserver(() => {
        const w = this.width();
        if (w !== this.u.width) this.u.setSize({ width: w, height: this.height() });
      }).observe(el);
    }
    width() { return Math.max(this.el.clientWidth, 200); }
    height() { return window.matchMedia('(max-width: 720px)').matches ? 160 : 200; }
    show(history) {
      if (!this.u) return;
      this.u.setData(history.data(this.specs));
      this.note.hidden = history.ts.length >= 2;
    }
    fail(message) {
      this.note.hidden = false;
      this.note.textContent = message;
    }
  }

  // charts draws path's history; after each load it calls then (the
  // cards show the latest rates).
  function charts(path, then) {
    const history = new History(path);
    const counts = new Chart($('chart-counts'), COUNTS, num, true);
    const rates = new Chart($('chart-rates'), RATES, rate);
    return {
      history,
      async refresh() {
        try {
          await history.load();
        } catch (e) {
          if (e.status !== 404) throw e;
          counts.fail(e.message);
          rates.fail(e.message);
          return;
        }
        counts.show(history);
        rates.show(history);
        then();
      },
    };
  }

  // ---- Overview --------------------------------------------------------

  function overview() {
    const table = $('tubes');
    const tbody = table.tBodies[0];
    const filter = $('filter');
    const heads = [...table.tHead.rows[0].cells];
    const columns = heads.map((th) => th.dataset.sort);
    const params = new URLSearchParams(location.search);
    let sortKey = columns.includes(params.get('sort')) ? params.get('sort') : 'name';
    let desc = params.get('desc') === '1';
    filter.value = params.get('q') || '';
    let tubes = [];
    const rows = new Map();
    let stats = null;
    const chart = charts('/api/v1/history', () => { if (stats) renderServer(stats); });

    function keepQuery() {
      const p = new URLSearchParams();
      if (filter.value) p.set('q', filter.value);
      if (sortKey !== 'name') p.set('sort', sortKey);
      if (desc) p.set('desc', '1');
      const q = p.toString();
      history.replaceState(null, '', q ? '?' + q : location.pathname);
    }

    for (const th of heads) {
      th.querySelector('button').addEventListener('click', () => {
        const key = th.dataset.sort;
        if (key === sortKey) desc = !desc;
        else { sortKey = key; desc = key !== 'name'; }
        keepQuery();
        renderTubes();
      });
    }
    filter.addEventListener('input', () => { keepQuery(); renderTubes(); });

    function compare(a, b) {
      let c = 0;
      if (sortKey !== 'name') c = (a[sortKey] || 0) - (b[sortKey] || 0);
      if (c === 0) c = a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
      return desc ? -c : c;
    }

    function makeRow(name) {
      const cells = columns.map((key) => h('td', { class: key === 'name' ? null : 'num' }));
      if (unreachable(name)) {
        cells[0].append(h('span', { class: 'mono', text: name, title: 'A browser cannot reach a tube named . or ..; use sproutctl' }));
      } else {
        cells[0].append(h('a', { href: tubePath(name), class: 'mono', text: name }));
      }
      return h('tr', {}, ...cells);
    }

    function updateRow(row, t) {
      columns.forEach((key, i) => {
        if (key === 'name') return;
        const cell = row.cells[i];
        const v = t[key] || 0;
        const text = key === 'pause-time-left' ? (v > 0 ? dur(v) : '–') : num(v);
        if (cell.textContent !== text) cell.textContent = text;
        cell.classList.toggle('zero', v === 0);
      });
    }

    function renderTubes() {
      const q = filter.value.trim().toLowerCase();
      const shown = tubes.filter((t) => t.name.toLowerCase().includes(q)).sort(compare);
      for (const th of heads) {
        if (th.dataset.sort === sortKey) th.setAttribute('aria-sort', desc ? 'descending' : 'ascending');
        else th.removeAttribute('aria-sort');
      }
      const focused = document.activeElement;
      let prev = null;
      const keep = new Set();
      for (const t of shown) {
        let row = rows.get(t.name);
        if (!row) rows.set(t.name, (row = makeRow(t.name)));
        updateRow(row, t);
        keep.add(t.name);
        const want = prev ? prev.nextSibling : tbody.firstChild;
        if (want !== row) tbody.insertBefore(row, want);
        prev = row;
      }
      const exists = new Set(tubes.map((t) => t.name));
      for (const [name, row] of rows) {
        if (keep.has(name)) continue;
        row.remove();
        if (!exists.has(name)) rows.delete(name);
      }
      // Moving a row takes the focus off a link in it: give it back.
      if (focused && focused !== document.activeElement && document.contains(focused)) focused.focus();
      $('tube-count').textContent = shown.length === tubes.length
        ? '(' + num(tubes.length) + ')' : '(' + num(shown.length) + ' of ' + num(tubes.length) + ')';
      const empty = $('tubes-empty');
      empty.hidden = shown.length > 0;
      empty.textContent = tubes.length ? 'No tube’s name contains “' + filter.value.trim() + '”.' : 'No tubes yet.';
    }

    function renderServer(s) {
      figures($('figures'), 'card', stateCards(s, chart.history));
      const items = [
        ['total', 'Jobs put', num(s['total-jobs'])],
        ['tubes', 'Tubes', num(s['current-tubes'])],
        ['conns', 'Connections', num(s['current-connections'])],
        ['producers', 'Producers', num(s['current-producers'])],
        ['workers', 'Workers', num(s['current-workers'])],
        ['waiting', 'Waiting', num(s['current-waiting'])],
        ['timeouts', 'Timeouts', num(s['job-timeouts'])],
        ['uptime', 'Up', dur(s.uptime)],
        ['version', 'Version', String(s.version)],
        ['host', 'Host', String(s.hostname)],
      ];
      if (s.draining) items.push(['draining', 'Mode', h('span', { class: 'pill pill-warn', text: 'draining' })]);
      figures($('facts'), '', items);
    }

    every(2000, async () => {
      let list;
      [stats, list] = await Promise.all([api('GET', '/api/v1/stats'), api('GET', '/api/v1/tubes')]);
      tubes = list.tubes;
      renderServer(stats);
      renderTubes();
      markShown();
    });
    every(5000, () => chart.refresh());
  }

  // ---- A tube's page ---------------------------------------------------

  function tubePage() {
    const name = body.dataset.tube;
    const missing = $('tube-missing');
    if (unreachable(name)) {
      missing.hidden = false;
      missing.textContent = 'A browser cannot reach a tube named “' + name + '”: the URL rules fold that path segment, escaped or not, before the request is sent. Use sproutctl or the protocol for it.';
      document.querySelectorAll('main section').forEach((s) => { s.hidden = true; });
      return;
    }
    const base = tubeAPI(name);
    let tube = null;
    const chart = charts(base + '/history', () => { if (tube) figures($('figures'), 'card', stateCards(tube, chart.history)); });
    const tabs = [...$('state-tabs').querySelectorAll('button')];
    const tbody = $('jobs').tBodies[0];
    const limitSelect = $('page-limit');
    let counts = {};
    let state = 'ready';
    let cursors = [null]; // the cursor of each page so far; the last is shown
    let next = null;
    let listed = 0;

    if (!canChange) {
      for (const c of document.querySelectorAll('.actions button, .actions input, .actions select, .actions textarea')) {
        c.disabled = true;
      }
      const why = mode === 'read-only'
        ? 'Read-only: the server has no admin token, so these are disabled.'
        : 'Log in to the console to use these.';
      $('actions-h').after(h('p', { class: 'hint', text: why }));
    }

    async function refreshTube() {
      let t;
      try {
        t = tube = await api('GET', base);
      } catch (e) {
        if (e.status !== 404) throw e;
        missing.hidden = false;
        missing.textContent = 'There is no tube “' + name + '” now: a tube exists while a job is in it or a client uses or watches it. This page shows it again when it comes back.';
        tube = null;
        return;
      }
      missing.hidden = true;
      counts = {
        ready: t['current-jobs-ready'], delayed: t['current-jobs-delayed'],
        reserved: t['current-jobs-reserved'], buried: t['current-jobs-buried'],
      };
      figures($('figures'), 'card', stateCards(t, chart.history));
      figures($('facts'), '', [
        ['total', 'Jobs put', num(t['total-jobs'])],
        ['cmd-delete', 'Deleted', num(t['cmd-delete'])],
        ['using', 'Using', num(t['current-using'])],
        ['watching', 'Watching', num(t['current-watching'])],
        ['waiting', 'Waiting', num(t['current-waiting'])],
        ['pauses', 'Pauses', num(t['cmd-pause-tube'])],
      ]);
      const paused = $('paused');
      paused.hidden = !(t['pause-time-left'] > 0);
      paused.textContent = 'paused, ' + dur(t['pause-time-left']) + ' left';
      for (const b of tabs) b.querySelector('.count').textContent = num(counts[b.dataset.state]);
      pageInfo();
      markShown();
    }

    function pageInfo() {
      const limit = Number(limitSelect.value);
      const first = (cursors.length - 1) * limit + 1;
      const total = counts[state];
      $('page-info').textContent = listed === 0
        ? (cursors.length > 1 ? 'No more ' + state + ' jobs' : '')
        : 'Jobs ' + num(first) + '–' + num(first + listed - 1) + (total != null ? ' of ' + num(Math.max(total, first + listed - 1)) : '');
      $('page-prev').disabled = cursors.length === 1;
      $('page-next').disabled = !next;
    }

    function preview(j) {
      if (!('body' in j)) return h('span', { text: 'hidden', title: 'Job bodies are hidden in read-only mode' });
      if (j['body-encoding'] === 'base64') return 'binary, ' + plural(atob(j.body).length, 'byte', 'bytes');
      const text = j.body.replace(/\s+/g, ' ').trim();
      return text.length > 80 ? text.slice(0, 80) + '…' : text || '(empty)';
    }

    function jobRow(j) {
      const id = j.id;
      const timed = j.state === 'delayed' || j.state === 'reserved';
      const acts = h('td', {});
      if (j.state === 'buried' || j.state === 'delayed') {
        acts.append(h('button', {
          type: 'button', class: 'small', text: 'Kick', 'aria-label': 'Kick job ' + id, disabled: !canChange,
          onclick: () => act(() => api('POST', '/api/v1/jobs/' + id + '/kick'), () => 'Kicked job ' + id + '.'),
        }), ' ');
      }
      if (j.state !== 'reserved') {
        acts.append(h('button', {
          type: 'button', class: 'small danger', text: 'Delete…', 'aria-label': 'Delete job ' + id, disabled: !canChange,
          onclick: async () => {
            if (!await confirmAction('Delete job ' + id + '?', 'Job ' + id + ' of tube “' + name + '” is deleted for good.', 'Delete')) return;
            act(() => api('DELETE', '/api/v1/jobs/' + id), () => 'Deleted job ' + id + '.');
          },
        }));
      }
      return h('tr', {},
        h('td', {}, h('a', { href: '/jobs/' + id, text: '#' + id })),
        h('td', { class: 'num', text: String(j.pri) }),
        h('td', { class: 'num', text: dur(j.age) }),
        h('td', { class: 'num', text: timed ? dur(j['time-left']) : '–' }),
        h('td', { class: 'num', text: num(j.reserves) }),
        h('td', { class: 'num', text: num(j.releases) }),
        h('td', { class: 'num', text: num(j.buries) }),
        h('td', { class: 'num', text: num(j.kicks) }),
        h('td', { class: 'body' }, preview(j)),
        acts);
    }

    async function loadJobs() {
      const q = new URLSearchParams({ state, limit: limitSelect.value });
      const cursor = cursors[cursors.length - 1];
      if (cursor) q.set('cursor', cursor);
      let d;
      try {
        d = await api('GET', base + '/jobs?' + q);
      } catch (e) {
        if (e.status !== 404) throw e;
        d = { jobs: [], next: null };
      }
      const hadFocus = tbody.contains(document.activeElement);
      tbody.replaceChildren(...d.jobs.map(jobRow));
      next = d.next;
      listed = d.jobs.length;
      $('time-left-h').textContent = state === 'reserved' ? 'TTR left' : state === 'delayed' ? 'Ready in' : 'Time left';
      const empty = $('jobs-empty');
      empty.hidden = listed > 0;
      empty.textContent = cursors.length > 1 ? 'No more ' + state + ' jobs.' : 'No ' + state + ' jobs.';
      if (hadFocus) $('jobs').parentElement.focus();
      pageInfo();
    }

    const listJobs = () => loadJobs().catch((e) => say(e.message, true));

    // act makes a change, says what came of it, and shows its effect.
    async function act(change, done) {
      try {
        const result = await change();
        say(done(result));
      } catch (e) {
        say(e.message, true);
      }
      await refreshTube().catch(() => {});
      await loadJobs().catch(() => {});
      if (listed === 0 && cursors.length > 1) {
        cursors.pop();
        await listJobs();
      }
    }

    for (const b of tabs) {
      b.addEventListener('click', () => {
        state = b.dataset.state;
        for (const o of tabs) o.setAttribute('aria-pressed', String(o === b));
        cursors = [null];
        listJobs();
      });
    }
    $('page-next').addEventListener('click', () => { if (next) { cursors.push(next); listJobs(); } });
    $('page-prev').addEventListener('click', () => { if (cursors.length > 1) { cursors.pop(); listJobs(); } });
    limitSelect.addEventListener('change', () => { cursors = [null]; listJobs(); });
    $('page-refresh').addEventListener('click', () => { refreshTube().catch(() => {}); listJobs(); });

    const whole = (input) => Number(input.value);
    $('put-form').addEventListener('submit', (e) => {
      e.preventDefault();
      const payload = {
        body: $('put-body').value,
        'body-encoding': $('put-encoding').value,
        pri: whole($('put-pri')),
        delay: whole($('put-delay')),
        ttr: whole($('put-ttr')),
      };
      act(() => api('POST', base + '/jobs', payload), (r) => {
        $('put-body').value = '';
        return 'Put job ' + r.id + ' into ' + name + '.';
      });
    });
    $('kick-form').addEventListener('submit', (e) => {
      e.preventDefault();
      act(() => api('POST', base + '/kick', { bound: whole($('kick-bound')) }),
        (r) => 'Kicked ' + plural(r.kicked, 'job', 'jobs') + '.');
    });
    $('pause-form').addEventListener('submit', (e) => {
      e.preventDefault();
      act(() => api('POST', base + '/pause', { delay: whole($('pause-delay')) }),
        (r) => (r.paused > 0 ? 'Paused ' + name + ' for ' + dur(r.paused) + '.' : 'Resumed ' + name + '.'));
    });
    $('pause-resume').addEventListener('click', () => {
      act(() => api('POST', base + '/pause', { delay: 0 }), () => 'Resumed ' + name + '.');
    });
    $('clear-form').addEventListener('submit', async (e) => {
      e.preventDefault();
      const which = $('clear-state').value;
      const n = which === 'all' ? (counts.ready || 0) + (counts.delayed || 0) + (counts.buried || 0) : counts[which] || 0;
      const what = which === 'all' ? 'ready, delayed and buried' : which;
      const ok = await confirmAction('Clear ' + what + ' jobs?',
        'The ' + plural(n, what + ' job', what + ' jobs') + ' of tube “' + name + '” (as of the last update) will be deleted for good.',
        'Delete them');
      if (!ok) return;
      act(() => api('POST', base + '/clear', { state: which }), (r) => 'Deleted ' + plural(r.deleted, 'job', 'jobs') + '.');
    });

    every(2000, refreshTube);
    every(5000, () => chart.refresh());
    listJobs();
  }

  // ---- A job's page ----------------------------------------------------

  function b64bytes(b64) {
    const raw = atob(b64);
    const bytes = new Uint8Array(raw.length);
    for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
    return bytes;
  }

  const HEX_SHOWN = 16 << 10;

  // hexDump is offset, 16 bytes in hex, and those bytes as ASCII.
  function hexDump(bytes, limit) {
    const lines = [];
    const end = Math.min(bytes.length, limit);
    for (let off = 0; off < end; off += 16) {
      const row = bytes.subarray(off, Math.min(off + 16, end));
      let hex = '';
      let ascii = '';
      for (let i = 0; i < 16; i++) {
        hex += i < row.length ? row[i].toString(16).padStart(2, '0') + ' ' : '   ';
        if (i === 7) hex += ' ';
        if (i < row.length) ascii += row[i] >= 0x20 && row[i] < 0x7f ? String.fromCharCode(row[i]) : '.';
      }
      lines.push(off.toString(16).padStart(8, '0') + '  ' + hex + ' |' + ascii + '|');
    }
    return lines.join('\n');
  }

  function hexView(bytes) {
    const pre = h('pre', { class: 'body hex', text: hexDump(bytes, HEX_SHOWN) });
    if (bytes.length <= HEX_SHOWN) return pre;
    const more = h('button', {
      type: 'button', text: 'Show all ' + plural(bytes.length, 'byte', 'bytes'),
      onclick: () => { pre.textContent = hexDump(bytes, bytes.length); more.remove(); },
    });
    return h('div', {}, pre, h('div', { class: 'buttons' }, more));
  }

  function renderBody(j) {
    const view = $('body-view');
    const tabs = $('body-tabs');
    if (!('body' in j)) {
      view.replaceChildren(h('p', {
        class: 'body-note',
        text: mode === 'read-only'
          ? 'Hidden: this server has no admin token, so the console is read-only and shows no job bodies.'
          : 'Hidden.',
      }));
      return;
    }
    const views = [];
    let size;
    if (j['body-encoding'] === 'base64') {
      const bytes = b64bytes(j.body);
      size = plural(bytes.length, 'byte', 'bytes') + ', binary';
      views.push(['Hex', () => hexView(bytes)], ['Base64', () => h('pre', { class: 'body', text: j.body })]);
    } else {
      size = plural(new TextEncoder().encode(j.body).length, 'byte', 'bytes') + ', text';
      const trimmed = j.body.trim();
      if (trimmed.startsWith('{') || trimmed.startsWith('[')) {
        try {
          const pretty = JSON.stringify(JSON.parse(trimmed), null, 2);
          size += ', JSON';
          views.push(['Pretty JSON', () => h('pre', { class: 'body json', text: pretty })]);
        } catch { /* not JSON after all: text */ }
      }
      views.push(['Text', () => (j.body ? h('pre', { class: 'body', text: j.body }) : h('p', { class: 'body-note', text: '(empty)' }))]);
    }
    $('body-size').textContent = '(' + size + ')';
    const show = (i) => {
      view.replaceChildren(views[i][1]());
      [...tabs.children].forEach((b, k) => b.setAttribute('aria-pressed', String(k === i)));
    };
    tabs.replaceChildren(...views.map(([label], i) => h('button', { type: 'button', text: label, onclick: () => show(i) })));
    tabs.hidden = views.length < 2;
    show(0);
  }

  function jobPage() {
    const id = body.dataset.job;
    const kick = $('job-kick');
    const del = $('job-delete');
    let job = null;

    function gone(message) {
      const missing = $('job-missing');
      missing.hidden = false;
      missing.textContent = message;
      kick.disabled = del.disabled = true;
      $('job-section').hidden = true;
      $('body-view').replaceChildren();
      $('body-tabs').hidden = true;
      $('body-size').textContent = '';
    }

    async function load() {
      try {
        job = await api('GET', '/api/v1/jobs/' + id);
      } catch (e) {
        if (e.status === 404) gone('There is no job ' + id + ': it was deleted, or never made.');
        else say(e.message, true);
        return;
      }
      const link = $('job-tube-link');
      if (!unreachable(job.tube)) {
        link.href = tubePath(job.tube);
        link.hidden = $('job-tube-sep').hidden = false;
      }
      link.textContent = 'Tube ' + job.tube;
      const state = $('job-state');
      state.hidden = false;
      state.className = 'pill ' + job.state;
      state.textContent = job.state;
      const timed = job.state === 'delayed' || job.state === 'reserved';
      const tube = unreachable(job.tube) ? job.tube : h('a', { href: tubePath(job.tube), class: 'mono', text: job.tube });
      figures($('job-figures'), '', [
        ['tube', 'Tube', tube],
        ['state', 'State', job.state],
        ['pri', 'Priority', String(job.pri)],
        ['age', 'Age', dur(job.age)],
        ['delay', 'Delay', dur(job.delay)],
        ['ttr', 'TTR', dur(job.ttr)],
        ['time-left', job.state === 'reserved' ? 'TTR left' : job.state === 'delayed' ? 'Ready in' : 'Time left', timed ? dur(job['time-left']) : '–'],
        ['reserves', 'Reserves', num(job.reserves)],
        ['timeouts', 'Timeouts', num(job.timeouts)],
        ['releases', 'Releases', num(job.releases)],
        ['buries', 'Buries', num(job.buries)],
        ['kicks', 'Kicks', num(job.kicks)],
        ['file', 'Log file', job.file ? num(job.file) : '–'],
      ]);
      kick.disabled = !canChange || !(job.state === 'buried' || job.state === 'delayed');
      del.disabled = !canChange || job.state === 'reserved';
      del.title = job.state === 'reserved' ? 'A reserved job is its worker’s to delete' : '';
      renderBody(job);
    }

    kick.addEventListener('click', async () => {
      try {
        await api('POST', '/api/v1/jobs/' + id + '/kick');
        say('Kicked job ' + id + '.');
      } catch (e) {
        say(e.message, true);
      }
      load();
    });
    del.addEventListener('click', async () => {
      const tube = job ? job.tube : '';
      if (!await confirmAction('Delete job ' + id + '?', 'Job ' + id + (tube ? ' of tube “' + tube + '”' : '') + ' is deleted for good.', 'Delete')) return;
      try {
        await api('DELETE', '/api/v1/jobs/' + id);
      } catch (e) {
        say(e.message, true);
        load();
        return;
      }
      say('Deleted job ' + id + '.');
      gone('Job ' + id + ' was deleted.');
      $('main').focus();
    });
    load();
  }

  // ---- Login and logout ------------------------------------------------

  function loginPage() {
    const form = $('login-form');
    const input = $('login-token');
    const error = $('login-error');
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      error.textContent = '';
      const button = form.querySelector('button');
      button.disabled = true;
      try {
        await api('POST', '/api/v1/session', { token: input.value });
        location.reload();
      } catch (err) {
        error.textContent = err.status === 401 ? 'That is not the admin token.' : err.message;
        button.disabled = false;
        input.select();
      }
    });
  }

  const logout = $('logout');
  if (logout) {
    logout.addEventListener('click', async () => {
      try {
        await api('DELETE', '/api/v1/session');
      } finally {
        location.reload();
      }
    });
  }

  // ---- Cluster ---------------------------------------------------------

  // clusterView is GET /cluster's answer (open, like /metrics).
  async function clusterView() {
    const res = await fetch('/cluster', { cache: 'no-store' });
    return res.json();
  }

  // memberBadge shows, on a cluster member's pages, which member they come
  // from and which one leads. The API forwards to the leader, so every
  // figure is the leader's wherever the page was opened.
  function memberBadge() {
    const pill = $('member');
    if (!pill) return;
    every(5000, async () => {
      let st;
      try {
        st = await clusterView();
      } catch (e) {
        pill.textContent = 'member: no answer';
        pill.className = 'pill pill-warn';
        return;
      }
      let text = 'member ' + st.node;
      if (st.serving) text += ' · leader';
      else if (st.leader) text += ' · leader ' + st.leader;
      else text += ' · no leader (election)';
      pill.textContent = text;
      pill.className = st.leader ? 'pill' : 'pill pill-warn';
    });
  }
  memberBadge();

  // clusterPage fills the Cluster page from GET /cluster: the members as
  // this one sees them, the cluster's Raft groups, and, with several,
  // where each tube lives.
  function clusterPage() {
    const facts = $('cluster-facts');
    const fill = (id, rows) => {
      const tbody = $(id).tBodies[0];
      tbody.replaceChildren(...rows);
    };
    every(2000, async () => {
      let st;
      try {
        st = await clusterView();
      } catch (e) {
        say('The member does not answer: ' + e.message, true);
        return;
      }
      facts.removeAttribute('aria-busy');
      facts.textContent = 'member ' + st.node + ' · ' + st.state + ' · term ' + num(st.term) +
        ' · leader ' + (st.leader || 'none (election)') + ' · commit ' + num(st.commit) + ' · applied ' + num(st.applied);
      const members = st.members || [];
      $('member-count').textContent = '(' + members.length + ')';
      fill('members', members.map((m) => h('tr', { 'data-member': m.name },
        h('th', { scope: 'row', text: m.name + (m.name === st.leader ? ' (leader)' : '') }),
        h('td', { text: (m.role || '–') + (m.draining ? ', draining' : '') + (m.cordoned ? ', cordoned' : '') }),
        h('td', { text: m.connected ? 'yes' : 'no' }),
        h('td', { text: m.address }),
        h('td', { text: m.client || '–' }),
        h('td', { class: 'num', text: m.protocol ? String(m.protocol) : '–' }),
        h('td', { class: 'num', text: m.match == null ? '–' : num(m.match) }))));
      const groups = st.groups || [];
      $('group-count').textContent = '(' + groups.length + ')';
      fill('groups', groups.map((g) => h('tr', { 'data-group': String(g.id) },
        h('th', { scope: 'row', class: 'num', text: String(g.id) }),
        h('td', { text: g.leader || 'none (election)' }),
        h('td', { text: (g.replicas || []).join(', ') +
          ((g.learners || []).length ? ' · learning: ' + g.learners.join(', ') : '') }),
        h('td', { class: 'num', text: num(g.tubes) }),
        h('td', { class: 'num', text: num(g.jobs) }),
        h('td', { text: g.held == null ? '–' : (g.held ? 'yes' : 'no') }))));
      if (groups.length > 1) await placements(groups);
    });

    // placements lists, with several groups, each tube with its group
    // and that group's leader (the fleet's GET /api/v1/tubes).
    async function placements(groups) {
      const section = $('placement');
      section.hidden = false;
      let list;
      try {
        list = await api('GET', '/api/v1/tubes');
      } catch (e) {
        $('placement-hint').textContent = 'The tubes could not be listed: ' + e.message;
        return;
      }
      $('placement-hint').textContent = 'Each tube lives whole in one group, picked by a hash of its name.';
      const leaders = new Map(groups.map((g) => [g.id, g.leader]));
      const tubes = (list.tubes || []).slice().sort((a, b) => (a.group - b.group) || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
      $('placement-count').textContent = '(' + num(tubes.length) + ')';
      fill('placements', tubes.map((t) => h('tr', { 'data-tube': t.name },
        h('th', { scope: 'row' }, h('a', { href: tubePath(t.name), class: 'mono', text: t.name })),
        h('td', { class: 'num', text: num(t.group) }),
        h('td', { text: leaders.get(t.group) || 'none (election)' }),
        h('td', { class: 'num', text: num(t['current-jobs-ready']) }),
        h('td', { class: 'num', text: num(t['current-jobs-reserved']) }),
        h('td', { class: 'num', text: num(t['current-jobs-delayed']) }),
        h('td', { class: 'num', text: num(t['current-jobs-buried']) }))));
    }
  }

  if (page === 'overview') overview();
  else if (page === 'tube') tubePage();
  else if (page === 'job') jobPage();
  else if (page === 'login') loginPage();
  else if (page === 'cluster') clusterPage();
})();
