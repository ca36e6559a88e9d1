/* meshcast guide: draws the cards from the embedded schedule data and animates them.
 * Plain ES2020 in one IIFE, no library, no network. Every text that comes from the
 * data goes through textContent or setAttribute, never innerHTML.
 * Test hooks: svg.stage[data-state=idle|playing|paused|done][data-step][data-steps],
 * cells carry data-rank/data-row/data-idx, ?step_ms=N sets the base step duration. */
(function () {
  'use strict';
  const DATA = JSON.parse(document.getElementById('guide-data').textContent);
  const NS = 'http' + '://www.w3.org/2000/svg';
  const params = new URLSearchParams(window.location.search);
  const BASE_MS = Math.max(50, Number(params.get('step_ms')) || 1400);
  const reducedMotion = () =>
    !!(window.matchMedia && window.matchMedia('(prefers-reduced-motion: reduce)').matches);
  // alpha-beta parameters of a few links; the estimate of a step is
  // alpha + (most bytes any rank sends or receives in it) / bandwidth
  const LINKS = [
    { id: 'shm', label: 'shared memory (α 0.5 µs, 10 GB/s)', alpha: 0.5e-6, bw: 10e9 },
    { id: 'ib', label: '100 Gb/s network (α 2 µs, 12.5 GB/s)', alpha: 2e-6, bw: 12.5e9 },
    { id: 'eth', label: '10 GbE TCP (α 25 µs, 1.25 GB/s)', alpha: 25e-6, bw: 1.25e9 },
  ];
  const SPEEDS = [0.25, 0.5, 1, 2, 4];
  const W = 780, LANE = 150, ROW_H = 24, RANK_GAP = 10, LABEL_W = 58, TOP = 12;
  // one-shot regions (the fast paths' shared memory) are drawn as boxes right of the ranks
  const REGION_GAP = 70, REGION_W = 52, REGION_H = 20;
  // what kind of line a transfer is: a message, a read of shared memory (arena slot or
  // one-shot region), or a copy straight from or into a peer's own buffer (single-copy,
  // symmetric)
  const lineKind = x => x.k === 'send' ? 'msg' : x.space === 'exposed' ? 'cma' : 'arena';

  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function sv(tag, attrs, text) {
    const e = document.createElementNS(NS, tag);
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function fmt(v) { return v === null || v === undefined ? '·' : String(v); }
  function fmtRow(vals) { return '[' + vals.map(fmt).join(', ') + ']'; }
  function fmtBytes(b) { return b >= 1024 ? (b / 1024).toFixed(1) + ' KiB' : b + ' B'; }
  function fmtTime(s) {
    if (s === 0) return '0';
    if (s < 1e-3) return (s * 1e6).toFixed(s < 1e-5 ? 2 : 1) + ' µs';
    return (s * 1e3).toFixed(2) + ' ms';
  }
  function stepCost(step, link) {
    if (!(step.messages > 0)) return 0;
    if (step.max_net === undefined) return link.alpha + step.max_rank_bytes / link.bw;
    // across hosts: inside a host always shared memory, between hosts the chosen link;
    // both kinds run at once in a step, so the slower one sets its time
    const shm = step.shm_bytes ? LINKS[0].alpha + step.max_shm / LINKS[0].bw : 0;
    const net = step.net_bytes ? link.alpha + step.max_net / link.bw : 0;
    return Math.max(shm, net);
  }
  const isHosts = name => name.startsWith('hosts:');
  // how the algorithm menu tells the families apart (p2p: plain messages, no note)
  const FAMILY_NOTE = { arena: ' (shared memory)', oneshot: ' (one-shot fast path)',
    cma: ' (single-copy fast path)', symmetric: ' (symmetric buffers)' };

  // ------------------------------------------------------------ one card
  function Card(card) {
    const c = this;
    c.card = card;
    c.algo = card.algos[0].name;
    c.p = Math.min(4, DATA.rank_counts[DATA.rank_counts.length - 1]);
    c.n = card.sizes[Math.min(1, card.sizes.length - 1)];
    c.speed = 1; c.link = LINKS[0];
    c.shape = DATA.shapes ? DATA.shapes[0] : '';
    c.hosts = card.hosts || [];
    c.step = 0; c.playing = false; c.raf = 0; c.timer = 0; c.t0 = 0;

    const sec = el('section', { class: 'card', id: 'card-' + card.key, tabindex: '0',
      'aria-labelledby': 'h-' + card.key, 'data-key': card.key });
    sec.appendChild(el('h2', { id: 'h-' + card.key }, card.title));
    sec.appendChild(el('p', { class: 'summary' }, card.summary));
    const cols = el('div', { class: 'cols' });
    const left = el('div', { class: 'left' });
    const pre = el('pre', { class: 'call', 'aria-label': 'torch.distributed call' });
    pre.appendChild(el('code', {}, card.call));
    left.appendChild(pre);
    const ba = el('div', { class: 'ba' });
    ba.appendChild(el('h3', {}, 'Before'));
    c.before = el('table', { class: 'vals before' }); ba.appendChild(c.before);
    ba.appendChild(el('h3', {}, 'After'));
    c.after = el('table', { class: 'vals after' }); ba.appendChild(c.after);
    left.appendChild(ba);
    cols.appendChild(left);

    const right = el('div', { class: 'right' });
    const ctr = el('div', { class: 'controls' });
    const sel = (label, cls, options, value, onchange) => {
      const lab = el('label', {}, label + ' ');
      const s = el('select', { class: cls, 'aria-label': label });
      for (const [v, t] of options) {
        const o = el('option', { value: String(v) }, t);
        if (String(v) === String(value)) o.selected = true;
        s.appendChild(o);
      }
      s.addEventListener('change', () => onchange(s.value));
      lab.appendChild(s); ctr.appendChild(lab);
      return s;
    };
    sel('algorithm', 'algo', card.algos.map(a => [a.name, a.name + (FAMILY_NOTE[a.family] || '')])
      .concat(c.hosts.map(a => [a.name, a.name.slice(6) + ' (across hosts)'])),
      c.algo, v => { c.algo = v; c.load(); });
    c.selRanks = sel('ranks', 'ranks', DATA.rank_counts.map(p => [p, String(p)]), c.p, v => { c.p = Number(v); c.load(); });
    c.selShape = sel('hosts × ranks', 'shape', (DATA.shapes || []).map(s => [s, s.replace('x', ' hosts × ') + ' ranks']),
      c.shape, v => { c.shape = v; c.load(); });
    sel(card.whole ? 'elements' : 'elements per piece', 'size',
      card.sizes.map(n => [n, n + ' (' + 4 * n + ' B)']), c.n,
      v => { c.n = Number(v); c.load(); });
    sel('speed', 'speed', SPEEDS.map(s => [s, s + '×']), c.speed, v => { c.speed = Number(v); });
    c.selLink = sel('link', 'link', LINKS.map(l => [l.id, l.label]), c.link.id,
      v => { c.link = LINKS.find(l => l.id === v); c.renderTable(); c.renderInfo(); });
    const btns = el('span', { class: 'buttons' });
    c.bReset = el('button', { type: 'button', class: 'reset', 'aria-label': 'reset (R)' }, 'Reset');
    c.bPlay = el('button', { type: 'button', class: 'play', 'aria-label': 'play or pause (space)' }, 'Play ▸');
    c.bStep = el('button', { type: 'button', class: 'step', 'aria-label': 'next step (right arrow)' }, 'Step ›');
    btns.append(c.bReset, c.bPlay, c.bStep);
    ctr.appendChild(btns);
    right.appendChild(ctr);
    c.desc = el('p', { class: 'algo-desc' }); right.appendChild(c.desc);
    c.svg = sv('svg', { class: 'stage', role: 'img', 'data-state': 'idle', 'data-step': '0' });
    right.appendChild(c.svg);
    const legend = el('div', { class: 'legend' });
    const lg = (color, text, dashed) => {
      const s = el('span');
      const i = el('i', { style: 'border-color:' + color + (dashed ? ';border-style:dashed' : '') });
      s.append(i, document.createTextNode(text)); legend.appendChild(s);
    };
    lg('var(--src)', 'sent from (solid arrow: a message)');
    lg('var(--arena)', 'read from a peer\'s shared-memory slot', true);
    lg('var(--hit)', 'written in this step');
    c.spaceLegend = {};
    for (const [cls, text] of [['region', 'a rank\'s one-shot region: copied in, then read by every rank'],
      ['cma', 'straight from or into a peer\'s own buffer (single-copy, symmetric)']]) {
      const s = el('span', { class: 'lg-' + cls });
      s.append(el('i'), document.createTextNode(text));
      legend.appendChild(s); c.spaceLegend[cls] = s;
    }
    c.hostLegend = [];
    for (const [cls, text] of [['shm', 'inside a host: shared memory'], ['net', 'between hosts: the network (MPI/Gloo)'],
      ['net-local', 'the network engine between ranks of one host']]) {
      const s = el('span', { class: 'lg-' + cls });
      s.append(el('i'), document.createTextNode(text));
      legend.appendChild(s); c.hostLegend.push(s);
    }
    right.appendChild(legend);
    c.info = el('div', { class: 'stepinfo', 'aria-live': 'polite' }); right.appendChild(c.info);
    c.tableWrap = el('div', { class: 'steps-wrap' }); right.appendChild(c.tableWrap);
    right.appendChild(el('p', { class: 'cost-note' },
      'Estimate: the textbook α-β model applied to this schedule\'s steps (each step costs ' +
      'α + most bytes any rank sends or receives in it ÷ bandwidth; local reduces are free). ' +
      'meshcast has no cost model of its own yet.'));
    cols.appendChild(right);
    sec.appendChild(cols);
    c.root = sec;

    c.bPlay.addEventListener('click', () => c.toggle());
    c.bStep.addEventListener('click', () => c.next());
    c.bReset.addEventListener('click', () => c.reset());
    sec.addEventListener('keydown', e => {
      if (e.target.tagName === 'SELECT') return;
      if (e.key === ' ' || e.key === 'k') { c.toggle(); e.preventDefault(); }
      else if (e.key === 'ArrowRight' || e.key === '.') { c.next(); e.preventDefault(); }
      else if (e.key === 'r' || e.key === 'Home') { c.reset(); e.preventDefault(); }
    });
    c.load();
  }

  Card.prototype.load = function () {
    this.stop();
    const hosts = isHosts(this.algo);
    const key = [this.card.key, this.algo, hosts ? this.shape : this.p, this.n].join('|');
    this.run = DATA.runs[key];
    const a = this.card.algos.concat(this.hosts).find(x => x.name === this.algo);
    // across hosts the user picks a shape, not a rank count
    this.selRanks.parentNode.hidden = hosts;
    this.selShape.parentNode.hidden = !hosts;
    for (const s of this.hostLegend) s.hidden = !hosts;
    this.spaceLegend.region.hidden = !this.run.regions;
    this.spaceLegend.cma.hidden = !this.run.steps.some(s => s.xfers.some(x => x.space === 'exposed'));
    this.root.setAttribute('data-hosts', hosts ? '1' : '0');
    if (hosts && this.link.id === 'shm') {  // between hosts the link is a network
      this.link = LINKS[1]; this.selLink.value = this.link.id;
    }
    this.desc.textContent = this.algo + ': ' + a.description +
      (a.requires ? ' (requires ' + a.requires + ')' : '') + '.';
    this.step = 0;
    this.layout();
    this.renderBA();
    this.renderTable();
    this.show(0, null);
  };

  Card.prototype.values = function (k) {
    return k === 0 ? this.run.before : this.run.steps[k - 1].values;
  };

  Card.prototype.renderBA = function () {
    const fill = (table, vals) => {
      table.textContent = '';
      for (let r = 0; r < this.run.p; r++) {
        const tr = el('tr');
        tr.appendChild(el('th', { scope: 'row' }, 'rank ' + r));
        const rows = this.run.rows[r];
        const txt = rows.length ? rows.map((row, i) =>
          (rows.length > 1 ? row[0] + ' ' : '') + fmtRow(vals[r][i])).join('  ') : '—';
        tr.appendChild(el('td', { 'data-rank': String(r) }, txt));
        table.appendChild(tr);
      }
    };
    fill(this.before, this.run.before);
    fill(this.after, this.values(this.run.steps.length));
  };

  Card.prototype.layout = function () {
    const run = this.run, svg = this.svg;
    svg.textContent = '';
    let maxCells = 1;
    for (const rows of run.rows) for (const row of rows) maxCells = Math.max(maxCells, row[1]);
    const x0 = LANE, cellsX = x0 + LABEL_W + 6;
    const room = W - cellsX - 10 - (run.regions ? REGION_GAP + REGION_W : 0);
    const cw = Math.max(18, Math.min(44, Math.floor(room / maxCells)));
    this.geo = { x0, cellsX, cw, y: [], h: [], right: [] };
    this.regions = [];
    let y = TOP;
    this.gArrows = sv('g', { class: 'arrows' });
    this.gRanks = sv('g', { class: 'ranks' });
    this.gPackets = sv('g', { class: 'packets' });
    this.cells = [];
    const hostOf = {};
    (run.hosts || []).forEach((h, i) => h.forEach(g => { hostOf[g] = i; }));
    this.gHosts = sv('g', { class: 'hosts' });
    let hostTop = 0;
    for (let r = 0; r < run.p; r++) {
      if (run.hosts && (r === 0 || hostOf[r] !== hostOf[r - 1])) { y += r ? 14 : 10; hostTop = y - 8; }
      const rows = run.rows[r];
      const h = Math.max(1, rows.length) * ROW_H + 6;
      this.geo.y.push(y); this.geo.h.push(h);
      const g = sv('g', { class: 'rank', 'data-rank': String(r) });
      g.appendChild(sv('text', { class: 'rank-label', x: '6', y: String(y + h / 2 + 4) },
        'rank ' + r + (this.card.rooted && r === DATA.root ? ' ★' : '')));
      const boxW = Math.max(LABEL_W + 60, cellsX - x0 + (rows.length ? Math.max(...rows.map(q => q[1])) : 1) * cw + 6);
      g.appendChild(sv('rect', { class: 'box', x: String(x0), y: String(y), width: String(boxW),
        height: String(h), rx: '5' }));
      this.geo.right.push(x0 + boxW);
      if (run.regions) {
        const rg = sv('g', { class: 'region', 'data-rank': String(r) });
        rg.appendChild(sv('rect', { x: String(x0 + boxW + REGION_GAP), y: String(y + h / 2 - REGION_H / 2),
          width: String(REGION_W), height: String(REGION_H), rx: '4' }));
        rg.appendChild(sv('text', { x: String(x0 + boxW + REGION_GAP + REGION_W / 2), y: String(y + h / 2) }, 'region'));
        g.appendChild(rg);
        this.regions.push(rg);
      }
      const mine = [];
      if (!rows.length) {
        g.appendChild(sv('text', { class: 'row-label', x: String(x0 + 6), y: String(y + h / 2 + 4) },
          this.card.key === 'barrier' ? 'no data' : 'no tensor in this call'));
      }
      rows.forEach((row, i) => {
        const ry = y + 3 + i * ROW_H;
        g.appendChild(sv('text', { class: 'row-label', x: String(x0 + 6), y: String(ry + ROW_H / 2 + 4) }, row[0]));
        const cellsRow = [];
        for (let j = 0; j < row[1]; j++) {
          const cg = sv('g', { class: 'cell', 'data-rank': String(r), 'data-row': String(i), 'data-idx': String(j) });
          cg.appendChild(sv('rect', { x: String(cellsX + j * cw), y: String(ry + 1), width: String(cw - 2),
            height: String(ROW_H - 2), rx: '3' }));
          cg.appendChild(sv('text', { x: String(cellsX + j * cw + (cw - 2) / 2), y: String(ry + ROW_H / 2) }));
          g.appendChild(cg);
          cellsRow.push(cg);
        }
        mine.push(cellsRow);
      });
      this.cells.push(mine);
      this.gRanks.appendChild(g);
      y += h + RANK_GAP;
      if (run.hosts && (r === run.p - 1 || hostOf[r + 1] !== hostOf[r])) {
        const hy = y - RANK_GAP + 4;
        this.gHosts.appendChild(sv('rect', { class: 'host', x: '2', y: String(hostTop), width: String(W - 4),
          height: String(hy - hostTop), rx: '8', 'data-host': String(hostOf[r]) }));
        this.gHosts.appendChild(sv('text', { class: 'host-label', x: String(W - 10), y: String(hostTop + 14),
          'text-anchor': 'end' }, 'host ' + hostOf[r] + ' (shared memory inside)'));
      }
    }
    const H = y + 4;
    svg.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
    svg.setAttribute('data-steps', String(run.steps.length));
    svg.setAttribute('aria-label', this.card.title + ' with ' + this.algo + ' on ' + run.p +
      ' ranks: ' + run.steps.length + ' steps');
    svg.append(this.gHosts, this.gArrows, this.gRanks, this.gPackets);
  };

  Card.prototype.anchor = function (r, loc) {
    const g = this.geo;
    if (loc && loc[0] >= 0) {
      return [g.x0, g.y[r] + 3 + loc[0] * ROW_H + ROW_H / 2];
    }
    return [g.x0, g.y[r] + g.h[r] / 2];
  };

  // the left middle of rank r's one-shot region box
  Card.prototype.regionAnchor = function (r) {
    const g = this.geo;
    return [g.right[r] + REGION_GAP, g.y[r] + g.h[r] / 2];
  };

  // a row's right end (where arrows to and from the region boxes meet the rank box)
  Card.prototype.rightAnchor = function (r, loc) {
    const [, y] = this.anchor(r, loc);
    return [this.geo.right[r], y];
  };

  Card.prototype.pathFor = function (x) {
    if (x.space === 'region') {  // out of the owner's region box, into the reader's row
      const [ax, ay] = this.regionAnchor(x.s), [bx, row] = this.rightAnchor(x.d, x.to);
      // readers of several regions: the arrows fan in over the row, in rank order
      const by = row + (x.s - (this.run.p - 1) / 2) * Math.min(4, (ROW_H - 8) / this.run.p);
      return 'M' + ax + ' ' + ay + ' C' + (ax - 30) + ' ' + ay + ' ' + (bx + 30) + ' ' + by + ' ' + (bx + 2) + ' ' + by;
    }
    const [ax, ay] = this.anchor(x.s, x.from), [bx, by] = this.anchor(x.d, x.to);
    const span = Math.abs(x.d - x.s) / Math.max(1, this.run.p - 1);
    let bulge = 12 + (LANE - 96) * span + (x.d > x.s ? 0 : 12);  // stays right of the labels
    if (x.link && x.link !== 'shm') bulge += 30;  // network arrows swing wider than shared memory
    return 'M' + ax + ' ' + ay + ' C' + (ax - bulge) + ' ' + ay + ' ' + (bx - bulge) + ' ' + by + ' ' + (bx - 2) + ' ' + by;
  };

  // draw values of step k; `active` is the step whose arrows are shown (or null)
  Card.prototype.show = function (k, active, phase) {
    const vals = this.values(k), prev = k > 0 ? this.values(k - 1) : null;
    this.cells.forEach((rows, r) => rows.forEach((cells, i) => cells.forEach((cg, j) => {
      const v = vals[r][i][j];
      cg.lastChild.textContent = fmt(v);
      cg.classList.toggle('empty', v === null);
      const changed = active && prev && phase !== 'moving' && prev[r][i][j] !== v;
      cg.classList.toggle('hit', !!changed);
      cg.classList.remove('src');
    })));
    this.gArrows.textContent = '';
    this.gPackets.textContent = '';
    this.packets = [];
    for (const rg of this.regions) rg.classList.remove('hit', 'src');
    if (active) {
      for (const l of active.local) {  // copies into my own one-shot region
        if (l.space !== 'region' || !this.regions[l.r]) continue;
        const [ax, ay] = this.rightAnchor(l.r, l.from), [bx, by] = this.regionAnchor(l.r);
        this.gArrows.appendChild(sv('path', { class: 'arrow arena put', d: 'M' + ax + ' ' + ay + ' L' + (bx - 2) + ' ' + by,
          'marker-end': 'url(#arrowA-' + this.card.key + ')' }));
        if (phase !== 'moving') this.regions[l.r].classList.add('hit');
        if (l.from[0] >= 0) this.mark(l.r, l.from, 'src');
      }
      for (const x of active.xfers) {
        const kind = lineKind(x), arena = kind !== 'msg';
        if (x.space === 'region' && this.regions[x.s]) this.regions[x.s].classList.add('src');
        const marker = kind === 'arena' ? 'arrowA-' : kind === 'cma' ? 'arrowC-'
          : x.link && x.link !== 'shm' ? 'arrowN-' : 'arrowS-';
        const path = sv('path', { class: 'arrow' + (arena ? ' ' + kind : '') + (x.link ? ' link-' + x.link : ''),
          d: this.pathFor(x), 'marker-end': 'url(#' + marker + this.card.key + ')' });
        if (x.link) path.setAttribute('data-link', x.link);
        this.gArrows.appendChild(path);
        if (x.from[0] >= 0) this.mark(x.s, x.from, 'src');
        if (phase === 'moving') {
          const pg = sv('g', { class: 'packet' + (arena ? ' ' + kind : '') + (x.link && x.link !== 'shm' ? ' net' : '') });
          const label = x.from[0] >= 0 && x.from[2] <= 2 && prev
            ? prev[x.s][x.from[0]].slice(x.from[1], x.from[1] + x.from[2]).map(fmt).join(',')
            : fmtBytes(x.bytes);
          const w = Math.max(22, label.length * 7 + 8);
          pg.appendChild(sv('rect', { x: String(-w / 2), y: '-8', width: String(w), height: '16', rx: '8' }));
          pg.appendChild(sv('text', { x: '0', y: '0' }, label));
          this.gPackets.appendChild(pg);
          this.packets.push([pg, path]);
        }
      }
      for (const l of active.local) if (l.to[0] >= 0 && phase !== 'moving' && l.k !== 'put') this.mark(l.r, l.to, 'hit');
    }
    this.defs();
    this.svg.setAttribute('data-step', String(k));
    this.svg.setAttribute('data-state', this.playing ? 'playing'
      : k === 0 ? 'idle' : k >= this.run.steps.length ? 'done' : 'paused');
    this.step = k;
    this.renderInfo();
    this.highlightRow();
  };

  Card.prototype.defs = function () {
    if (this.svg.querySelector('defs')) return;
    const d = sv('defs');
    for (const [id, color] of [['arrowS-', 'var(--accent)'], ['arrowA-', 'var(--arena)'], ['arrowN-', 'var(--net)'],
      ['arrowC-', 'var(--cma)']]) {
      const m = sv('marker', { id: id + this.card.key, viewBox: '0 0 10 10', refX: '9', refY: '5',
        markerWidth: '7', markerHeight: '7', orient: 'auto-start-reverse' });
      m.appendChild(sv('path', { d: 'M0 0 L10 5 L0 10 z', style: 'fill:' + color }));
      d.appendChild(m);
    }
    this.svg.insertBefore(d, this.svg.firstChild);
  };

  Card.prototype.mark = function (r, loc, cls) {
    const row = this.cells[r] && this.cells[r][loc[0]];
    if (!row) return;
    for (let j = loc[1]; j < loc[1] + loc[2] && j < row.length; j++) row[j].classList.add(cls);
  };

  Card.prototype.renderInfo = function () {
    const run = this.run, k = this.step, N = run.steps.length;
    let total = 0;
    for (const s of run.steps) total += stepCost(s, this.link);
    let text;
    const where = run.hosts ? run.hosts.length + ' hosts × ' + run.hosts[0].length + ' ranks' : run.p + ' ranks';
    if (k === 0) {
      text = N + ' step' + (N === 1 ? '' : 's') + ' on ' + where + '; α-β estimate ' +
        fmtTime(total) + ' on ' + this.link.label.split(' (')[0] + '. Press Play or Step.';
    } else {
      const s = run.steps[k - 1];
      text = 'Step ' + k + ' of ' + N + ' (round ' + s.round + (s.wave ? ', phase ' + s.wave : '') + '): ' +
        s.messages + ' transfer' + (s.messages === 1 ? '' : 's') + ', ' + fmtBytes(s.bytes) + ' in all, ' +
        'at most ' + fmtBytes(s.max_rank_bytes) + ' per rank; α-β ' + fmtTime(stepCost(s, this.link)) +
        ' (all steps ' + fmtTime(total) + ').';
      const puts = s.local.filter(l => l.space === 'region').map(l => l.r);
      const notes = (puts.length ? ['rank' + (puts.length > 1 ? 's ' : ' ') + puts.join(', ') +
        ' copy their data into their one-shot region'] : []).concat(s.notes || []);
      if (notes.length) text += ' Here ' + notes.join('; ') + '.';
      if (run.hosts) {
        text = 'Step ' + k + ' of ' + N + ': ' + s.calls.join('; ') + '. Inside hosts (shared memory) ' +
          fmtBytes(s.shm_bytes) + ', between hosts (network, ' + this.link.label.split(' (')[0] + ') ' +
          fmtBytes(s.net_bytes) + '; α-β ' + fmtTime(stepCost(s, this.link)) + ' (all steps ' + fmtTime(total) + ').';
      }
    }
    this.info.textContent = text;
  };

  Card.prototype.renderTable = function () {
    const t = el('table', { class: 'steps' });
    const head = el('tr');
    const hosts = !!this.run.hosts;
    for (const h of ['step', hosts ? 'calls' : 'round', 'transfers', hosts ? 'shm / network' : 'bytes', 'max/rank', 'α-β']) head.appendChild(el('th', { scope: 'col' }, h));
    t.appendChild(head);
    this.run.steps.forEach((s, i) => {
      const tr = el('tr', { 'data-step': String(i + 1) });
      for (const v of [String(i + 1), hosts ? s.calls.join('; ') : s.round + (s.wave ? '.' + s.wave : ''), String(s.messages),
        hosts ? fmtBytes(s.shm_bytes) + ' / ' + fmtBytes(s.net_bytes) : fmtBytes(s.bytes), fmtBytes(s.max_rank_bytes),
        fmtTime(stepCost(s, this.link))]) tr.appendChild(el('td', {}, v));
      t.appendChild(tr);
    });
    this.tableWrap.textContent = '';
    this.tableWrap.appendChild(t);
    this.highlightRow();
  };

  Card.prototype.highlightRow = function () {
    for (const tr of this.tableWrap.querySelectorAll('tr[data-step]')) {
      tr.classList.toggle('current', Number(tr.getAttribute('data-step')) === this.step);
    }
  };

  // ---------------------------------------------------------- controls
  Card.prototype.duration = function () { return BASE_MS / this.speed; };

  Card.prototype.next = function () {
    this.stop();
    if (this.step < this.run.steps.length) this.show(this.step + 1, this.run.steps[this.step], 'done');
  };

  Card.prototype.reset = function () { this.stop(); this.show(0, null); };

  Card.prototype.toggle = function () { if (this.playing) this.pause(); else this.play(); };

  Card.prototype.stop = function () {
    this.playing = false;
    if (this.raf) cancelAnimationFrame(this.raf);
    if (this.timer) clearTimeout(this.timer);
    this.raf = 0; this.timer = 0;
    if (this.bPlay) this.bPlay.textContent = 'Play ▸';
  };

  Card.prototype.pause = function () {
    const k = this.step;
    this.stop();
    this.show(k, k > 0 ? this.run.steps[k - 1] : null, 'done');
  };

  Card.prototype.play = function () {
    if (this.step >= this.run.steps.length) this.show(0, null);
    this.playing = true;
    this.bPlay.textContent = 'Pause ❚❚';
    this.begin();
  };

  // animate step this.step+1: packets travel for 65% of the duration, then values change
  Card.prototype.begin = function () {
    if (!this.playing) return;
    const k = this.step, N = this.run.steps.length;
    if (k >= N) { this.stop(); this.show(N, this.run.steps[N - 1] || null, 'done'); return; }
    const s = this.run.steps[k];
    if (reducedMotion()) {
      this.show(k + 1, s, 'done');
      this.timer = setTimeout(() => { this.timer = 0; this.begin(); }, this.duration());
      return;
    }
    this.show(k, s, 'moving');
    const D = this.duration();
    let t0 = -1;  // the first frame's timestamp: rAF's clock, whatever performance.now says
    const frame = now => {
      if (!this.playing) return;
      if (t0 < 0) t0 = now;
      const t = (now - t0) / D;
      if (t >= 1) {  // a slow frame may skip the value change: never skip the step itself
        if (this.step === k) this.show(k + 1, s, 'done');
        this.raf = 0; this.begin(); return;
      }
      if (t < 0.65) {
        for (const [pg, path] of this.packets) {
          const L = path.getTotalLength(), pt = path.getPointAtLength(L * (t / 0.65));
          pg.setAttribute('transform', 'translate(' + pt.x + ',' + pt.y + ')');
        }
      } else if (this.step === k) {
        this.show(k + 1, s, 'done');
      }
      this.raf = requestAnimationFrame(frame);
    };
    this.raf = requestAnimationFrame(frame);
  };

  // ------------------------------------------------------------ topologies
  function topologies(root) {
    const kinds = [
      ['1-to-1', 'one sender, one receiver', [[0, 1]]],
      ['1-to-many', 'one rank feeds all others', [[0, 1], [0, 2], [0, 3]]],
      ['many-to-1', 'all ranks feed one', [[1, 0], [2, 0], [3, 0]]],
      ['all-to-all', 'every rank talks to every rank', [[0, 1], [0, 2], [0, 3], [1, 2], [1, 3], [2, 3]]],
    ];
    const pos = [[60, 30], [160, 30], [160, 110], [60, 110]];
    const wrap = el('div', { class: 'topos' });
    for (const [name, what, edges] of kinds) {
      const fig = el('figure', { 'data-topology': name });
      const s = sv('svg', { viewBox: '0 0 220 140', role: 'img', 'aria-label': name + ': ' + what });
      const d = sv('defs');
      const m = sv('marker', { id: 'tm-' + name, viewBox: '0 0 10 10', refX: '9', refY: '5', markerWidth: '6',
        markerHeight: '6', orient: 'auto-start-reverse' });
      m.appendChild(sv('path', { d: 'M0 0 L10 5 L0 10 z', style: 'fill:var(--accent)' }));
      d.appendChild(m); s.appendChild(d);
      for (const [a, b] of edges) {
        const [x1, y1] = pos[a], [x2, y2] = pos[b];
        const dx = x2 - x1, dy = y2 - y1, L = Math.hypot(dx, dy), ux = dx / L, uy = dy / L;
        const attrs = { x1: String(x1 + ux * 20), y1: String(y1 + uy * 20), x2: String(x2 - ux * 20),
          y2: String(y2 - uy * 20), class: 'arrow', 'marker-end': 'url(#tm-' + name + ')' };
        if (name === 'all-to-all') attrs['marker-start'] = 'url(#tm-' + name + ')';
        s.appendChild(sv('line', attrs));
      }
      pos.forEach(([x, y], r) => {
        s.appendChild(sv('circle', { cx: String(x), cy: String(y), r: '17', style: 'fill:#fff;stroke:#8892a3' }));
        s.appendChild(sv('text', { x: String(x), y: String(y + 4), 'text-anchor': 'middle', class: 'rank-label' }, String(r)));
      });
      fig.appendChild(s);
      const cap = el('figcaption');
      cap.appendChild(el('b', {}, name));
      cap.appendChild(document.createTextNode(what + ': '));
      cap.appendChild(document.createTextNode(DATA.cards.filter(c => c.topology === name).map(c => c.title).join(', ') + '.'));
      fig.appendChild(cap);
      wrap.appendChild(fig);
    }
    root.appendChild(wrap);
  }

  // ------------------------------------------------------------ boot
  const main = document.getElementById('cards'), toc = document.getElementById('toc');
  window.meshcastGuide = {};
  for (const card of DATA.cards) {
    const c = new Card(card);
    main.appendChild(c.root);
    window.meshcastGuide[card.key] = c;
    toc.appendChild(el('a', { href: '#card-' + card.key }, card.title));
  }
  toc.appendChild(el('a', { href: '#topologies' }, 'topologies'));
  topologies(document.getElementById('topologies'));
  document.body.setAttribute('data-ready', '1');
})();
