/* meshcast replay: draws a recorded run (lanes, spans, message arrows), a scrubber,
 * the details of a call, the collectives' skew and the hang view.
 * Plain ES2020 in one IIFE, no library, no network. Every text that comes from the
 * trace goes through textContent or setAttribute, never innerHTML.
 * Test hooks: svg#timeline[data-view="t0,t1"] (ns), g.lane[data-rank], rect.span[data-call]
 * [data-rank][data-kind][data-coll], path.msg[data-src][data-dst][data-coll],
 * line#cursor[data-t], #details[data-call], #hang[data-hung], ?view=a,b (seconds),
 * ?select=callId, ?t=seconds (cursor). */
(function () {
  'use strict';
  const D = JSON.parse(document.getElementById('trace-data').textContent);
  const NS = 'http' + '://www.w3.org/2000/svg';
  const params = new URLSearchParams(window.location.search);
  const reducedMotion = () =>
    !!(window.matchMedia && window.matchMedia('(prefers-reduced-motion: reduce)').matches);
  const W = 1220, GUTTER = 150, RIGHT = 12, AXIS = 26, ROW = 22, LANE_PAD = 8;
  const KINDS = ['barrier', 'broadcast', 'reduce', 'all_reduce', 'gather', 'all_gather',
    'scatter', 'reduce_scatter', 'all_to_all', 'send', 'recv'];
  const END = Math.max(D.duration_ns, 1);

  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined && text !== null) e.textContent = text;
    return e;
  }
  function sv(tag, attrs, text) {
    const e = document.createElementNS(NS, tag);
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined && text !== null) e.textContent = text;
    return e;
  }
  function fmtDur(ns) {
    if (ns === null || ns === undefined) return '—';
    const a = Math.abs(ns);
    if (a < 1e3) return ns.toFixed(0) + ' ns';
    if (a < 1e6) return (ns / 1e3).toFixed(a < 1e4 ? 2 : 1) + ' µs';
    if (a < 1e9) return (ns / 1e6).toFixed(a < 1e7 ? 3 : 2) + ' ms';
    return (ns / 1e9).toFixed(a < 1e10 ? 3 : 2) + ' s';
  }
  function fmtAt(ns) {  // a moment: seconds since the trace's start, like the hang view
    const s = ns / 1e9;
    return (s >= 10 ? s.toFixed(1) : s >= 1 ? s.toFixed(2) : s.toFixed(6)) + ' s';
  }
  function fmtBytes(b) {
    if (b === null || b === undefined) return '—';
    if (b >= 1 << 30) return (b / (1 << 30)).toFixed(2) + ' GiB';
    if (b >= 1 << 20) return (b / (1 << 20)).toFixed(2) + ' MiB';
    if (b >= 1024) return (b / 1024).toFixed(1) + ' KiB';
    return b + ' B';
  }
  function fmtBw(v) {
    if (v === null || v === undefined) return '—';
    if (v >= 1e9) return (v / 1e9).toFixed(2) + ' GB/s';
    if (v >= 1e6) return (v / 1e6).toFixed(2) + ' MB/s';
    return (v / 1e3).toFixed(2) + ' kB/s';
  }
  function ranksText(rs) { return (rs.length === 1 ? 'rank ' : 'ranks ') + rs.join(','); }
  function short(c) {
    const a = c.algorithm || c.kind;
    const i = a.indexOf('/');
    return i >= 0 ? a.slice(i + 1) : a;
  }

  // ------------------------------------------------------------ state
  const S = {
    v0: 0, v1: END, t: 0, sel: null, playing: false, raf: 0, timer: 0, last: 0,
    arrows: true,
  };
  const byRank = D.ranks.map(() => []);
  for (const c of D.calls) byRank[c.rank].push(c);
  for (const list of byRank) list.sort((a, b) => a.b - b.b);
  const laneTop = [];
  let H = AXIS;
  for (const r of D.ranks) {
    laneTop.push(H);
    H += r.rows * ROW + 2 * LANE_PAD;
  }
  H += 6;
  const endOf = (c) => (c.e === null ? END : c.e);
  const x = (t) => GUTTER + ((t - S.v0) / (S.v1 - S.v0)) * (W - GUTTER - RIGHT);
  const tOfX = (px) => S.v0 + ((px - GUTTER) / (W - GUTTER - RIGHT)) * (S.v1 - S.v0);
  const yRow = (rank, row) => laneTop[rank] + LANE_PAD + row * ROW;

  // ------------------------------------------------------------ summary + legend
  const hosts = Array.from(new Set(D.ranks.filter((r) => r.host).map((r) => r.host)));
  document.getElementById('summary').textContent =
    `${D.world_size} ranks on ${hosts.length} host${hosts.length === 1 ? '' : 's'}` +
    (hosts.length ? ` (${hosts.join(', ')})` : '') +
    ` · ${D.calls.length} calls · ${D.collectives.length} collectives · ` +
    `${D.messages.length} messages · ${fmtDur(END)} recorded · trace ${D.directory}`;
  const legend = document.getElementById('legend');
  const seen = new Set(D.calls.map((c) => c.kind));
  for (const k of KINDS) {
    if (!seen.has(k)) continue;
    const s = el('span', {});
    s.appendChild(el('i', { class: 'k-' + k }));
    s.appendChild(document.createTextNode(k));
    legend.appendChild(s);
  }
  for (const [cls, text] of [['open', 'never finished'], ['err', 'error'], ['msg', 'message']]) {
    const s = el('span', {});
    s.appendChild(el('i', { class: 'lg-' + cls }));
    s.appendChild(document.createTextNode(text));
    legend.appendChild(s);
  }

  // ------------------------------------------------------------ hang view
  function callButton(id, text) {
    const b = el('button', { type: 'button', class: 'linklike', 'data-call': String(id) }, text);
    b.addEventListener('click', () => { select(id, true); });
    return b;
  }
  function drawBanner() {
    // the verdict first, above the timeline: the hang view below has the rest
    const ban = document.getElementById('banner');
    const rep = D.hang;
    ban.className = rep.hung ? 'bad' : 'ok';
    ban.appendChild(el('b', {}, rep.hung ? 'Hang / desync: ' : 'OK: '));
    ban.appendChild(el('span', { class: 'headline' }, rep.headline));
    const stuck = rep.findings.find((f) => f.text === rep.headline);
    if (stuck) for (const w of stuck.where) ban.appendChild(el('div', { class: 'where' }, w));
    if (rep.hung) {
      const a = el('a', { href: '#hang' }, 'the hang view');
      const p = el('div', { class: 'where' }, 'More in ');
      p.appendChild(a);
      p.appendChild(document.createTextNode(': every disagreement, the calls that never finished, the last calls of every rank.'));
      ban.appendChild(p);
    }
  }
  function drawHang() {
    const sec = document.getElementById('hang');
    const rep = D.hang;
    sec.setAttribute('data-hung', rep.hung ? '1' : '0');
    sec.classList.add(rep.hung ? 'bad' : 'ok');
    sec.appendChild(el('p', { class: 'headline' }, rep.headline));
    const grid = el('div', { class: 'hang-grid' });
    const left = el('div', { class: 'hang-left' });
    const right = el('div', { class: 'hang-right' });
    grid.appendChild(left); grid.appendChild(right);
    sec.appendChild(grid);
    if (rep.findings.length) {
      left.appendChild(el('h3', {}, 'Where the ranks disagreed or one never arrived (first one first)'));
      const ol = el('ol', { class: 'findings' });
      for (const f of rep.findings) {
        const li = el('li', { class: 'finding ' + f.type, 'data-group': f.group,
          'data-seq': String(f.seq) });
        li.appendChild(el('span', {}, f.text));
        for (const w of f.where) li.appendChild(el('div', { class: 'where' }, w));
        const coll = D.collectives[f.coll];
        const first = Number(Object.values(coll.calls)[0]);
        li.appendChild(document.createTextNode(' '));
        li.appendChild(callButton(first, 'show'));
        ol.appendChild(li);
      }
      left.appendChild(ol);
    }
    if (rep.unfinished.length) {
      left.appendChild(el('h3', {}, 'Calls that never finished (end = null)'));
      const ul = el('ul', { class: 'unfinished' });
      for (const u of rep.unfinished) {
        const li = el('li', {});
        li.appendChild(callButton(u.call, `rank ${u.rank}: ${u.label}`));
        li.appendChild(document.createTextNode(` since ${fmtAt(u.since_ns)}` +
          (u.error ? ` (${u.error})` : '')));
        ul.appendChild(li);
      }
      left.appendChild(ul);
    }
    right.appendChild(el('h3', {}, 'Last calls of every rank'));
    const wrap = el('div', { class: 'table-wrap' });
    const table = el('table', { class: 'last' });
    const ranks = Object.keys(rep.last);
    const hr = el('tr');
    for (const r of ranks) hr.appendChild(el('th', { scope: 'col' }, D.ranks[r] ? D.ranks[r].label : 'rank ' + r));
    table.appendChild(hr);
    const depth = Math.max(1, ...ranks.map((r) => rep.last[r].length));
    for (let i = 0; i < depth; i++) {
      const tr = el('tr');
      for (const r of ranks) {
        const list = rep.last[r];
        // align the newest calls on the last row, so the columns read side by side
        const c = list[i - (depth - list.length)];
        const td = el('td', c ? { class: 'st-' + c.state, 'data-rank': r } : {});
        if (c) {
          td.appendChild(callButton(c.call, c.label));
          td.appendChild(el('div', { class: 'muted' },
            short(c) + ' · ' + (c.state === 'unfinished' ? 'waits since ' + fmtAt(c.b)
              : c.state + ' at ' + fmtAt(c.e === null ? c.b : c.e))));
        } else if (D.ranks[r] && D.ranks[r].missing && i === depth - 1) {
          td.textContent = 'no trace file';
        }
        tr.appendChild(td);
      }
      table.appendChild(tr);
    }
    wrap.appendChild(table);
    right.appendChild(wrap);
  }

  // ------------------------------------------------------------ controls
  const ctr = document.getElementById('controls');
  const play = el('button', { type: 'button', class: 'play', 'aria-label': 'play' }, 'Play');
  const scrub = el('input', { type: 'range', min: '0', max: '1000', step: '1', value: '0',
    class: 'scrub', 'aria-label': 'time cursor' });
  const readout = el('output', { class: 'readout', 'aria-live': 'off' });
  const zin = el('button', { type: 'button', class: 'zoom-in', 'aria-label': 'zoom in' }, '+');
  const zout = el('button', { type: 'button', class: 'zoom-out', 'aria-label': 'zoom out' }, '−');
  const fit = el('button', { type: 'button', class: 'fit' }, 'Fit');
  const zsel = el('button', { type: 'button', class: 'zoom-sel' }, 'Zoom to selection');
  const arrowsBox = el('input', { type: 'checkbox', checked: 'checked', class: 'arrows' });
  const arrowsLab = el('label', {}, ' arrows');
  arrowsLab.prepend(arrowsBox);
  for (const e of [play, scrub, readout, zout, zin, fit, zsel, arrowsLab]) ctr.appendChild(e);

  const wrap = document.getElementById('timeline-wrap');
  const svg = sv('svg', { id: 'timeline', viewBox: `0 0 ${W} ${H}`, tabindex: '0', role: 'img',
    'aria-label': 'timeline: a lane per rank; arrow keys select calls' });
  wrap.appendChild(svg);
  const defs = sv('defs');
  const mk = sv('marker', { id: 'ah', viewBox: '0 0 8 8', refX: '7', refY: '4', markerWidth: '7',
    markerHeight: '7', orient: 'auto-start-reverse' });
  mk.appendChild(sv('path', { d: 'M0,0 L8,4 L0,8 z', class: 'ahead' }));
  defs.appendChild(mk);
  const pat = sv('pattern', { id: 'hatch', width: '6', height: '6', patternUnits: 'userSpaceOnUse',
    patternTransform: 'rotate(45)' });
  pat.appendChild(sv('rect', { width: '6', height: '6', class: 'hatch-bg' }));
  pat.appendChild(sv('line', { x1: '0', y1: '0', x2: '0', y2: '6', class: 'hatch-line' }));
  defs.appendChild(pat);
  const clip = sv('clipPath', { id: 'plot' });
  clip.appendChild(sv('rect', { x: String(GUTTER), y: '0', width: String(W - GUTTER - RIGHT + 2),
    height: String(H) }));
  defs.appendChild(clip);
  svg.appendChild(defs);
  const gAxis = sv('g', { class: 'axis' });
  const gLanes = sv('g', { class: 'lanes' });
  const gPlot = sv('g', { 'clip-path': 'url(#plot)' });
  const gSpans = sv('g', { class: 'spans' });
  const gMsgs = sv('g', { class: 'msgs' });
  const cursor = sv('line', { id: 'cursor', y1: String(AXIS - 4), y2: String(H - 4) });
  gPlot.appendChild(gSpans);
  gPlot.appendChild(gMsgs);
  gPlot.appendChild(cursor);
  svg.appendChild(gAxis);
  svg.appendChild(gLanes);
  svg.appendChild(gPlot);

  // ------------------------------------------------------------ drawing
  const spanEls = new Map();
  function tickLabel(t, step) {
    const dec = Math.max(0, Math.min(9, Math.ceil(-Math.log10(step / 1e9) - 1e-9)));
    return (t / 1e9).toFixed(dec) + ' s';
  }
  function ticks() {
    const span = S.v1 - S.v0;
    const raw = span / 8;
    const p = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((m) => m * p).find((s) => s >= raw) || raw;
    const out = [];
    for (let t = Math.ceil(S.v0 / step) * step; t <= S.v1; t += step) out.push(t);
    return [out, step];
  }
  function drawLanes() {
    gLanes.textContent = '';
    D.ranks.forEach((r, i) => {
      const g = sv('g', { class: 'lane' + (r.missing ? ' missing' : ''), 'data-rank': String(r.rank) });
      const h = r.rows * ROW + 2 * LANE_PAD;
      g.appendChild(sv('rect', { class: 'lane-bg' + (i % 2 ? ' odd' : ''), x: '0', y: String(laneTop[i]),
        width: String(W), height: String(h) }));
      g.appendChild(sv('text', { class: 'lane-label', x: '8', y: String(laneTop[i] + h / 2 + 4) },
        r.missing ? `rank ${r.rank} (no trace)` : r.label));
      gLanes.appendChild(g);
    });
  }
  function draw() {
    svg.setAttribute('data-view', `${Math.round(S.v0)},${Math.round(S.v1)}`);
    gAxis.textContent = '';
    const [ts, step] = ticks();
    for (const t of ts) {
      const px = x(t);
      gAxis.appendChild(sv('line', { class: 'tick', x1: String(px), x2: String(px), y1: String(AXIS - 6),
        y2: String(H - 4) }));
      gAxis.appendChild(sv('text', { class: 'tick-label', x: String(px), y: String(AXIS - 10) }, tickLabel(t, step)));
    }
    gSpans.textContent = '';
    spanEls.clear();
    for (const c of D.calls) {
      const e = endOf(c);
      if (e < S.v0 || c.b > S.v1) continue;
      const x0 = Math.max(x(c.b), GUTTER - 2), x1 = Math.min(x(e), W);
      const w = Math.max(3, x1 - x0);
      const y = yRow(c.rank, c.row);
      const cls = ['span', 'k-' + c.kind];
      if (c.e === null) cls.push('open');
      if (c.error) cls.push('err');
      if (c.async) cls.push('async');
      const g = sv('g', { class: 'call' });
      const rect = sv('rect', { class: cls.join(' '), x: String(x0), y: String(y + 2), width: String(w),
        height: String(ROW - 4), rx: '3', 'data-call': String(c.id), 'data-rank': String(c.rank),
        'data-kind': c.kind, 'data-coll': c.coll === null ? '' : String(c.coll) });
      rect.appendChild(sv('title', {}, `${c.label} · ${c.algorithm || c.kind} · ` +
        (c.e === null ? 'never finished' : fmtDur(c.e - c.b)) + (c.error ? ' · ' + c.error : '')));
      g.appendChild(rect);
      if (c.e === null) {
        g.appendChild(sv('rect', { class: 'open-fill', x: String(x0), y: String(y + 2), width: String(w),
          height: String(ROW - 4), rx: '3', 'pointer-events': 'none' }));
      }
      const label = short(c) + (c.kind === 'send' ? ' →' + c.peer : c.kind === 'recv'
        ? ' ←' + (c.peer === null ? '*' : c.peer) : '');
      if (w > label.length * 6.4 + 6) {
        g.appendChild(sv('text', { class: 'span-label', x: String(x0 + 4), y: String(y + ROW / 2 + 4),
          'pointer-events': 'none' }, label));
      }
      g.addEventListener('click', () => select(c.id, false));
      gSpans.appendChild(g);
      spanEls.set(c.id, rect);
    }
    gMsgs.textContent = '';
    if (S.arrows) {
      D.messages.forEach((m, k) => {
        if (Math.max(m.t0, m.t1) < S.v0 || Math.min(m.t0, m.t1) > S.v1) return;
        const a = D.calls[m.from], b = D.calls[m.to];
        const y0 = yRow(m.src, a.row) + ROW / 2, y1 = yRow(m.dst, b.row) + ROW / 2;
        const x0 = x(m.t0), x1 = Math.max(x(m.t1), x0 + 1);
        const p = sv('path', { class: 'msg', d: `M${x0.toFixed(1)},${y0} L${x1.toFixed(1)},${y1}`,
          'marker-end': 'url(#ah)', 'data-src': String(m.src), 'data-dst': String(m.dst),
          'data-coll': m.coll === null ? '' : String(m.coll), 'data-msg': String(k) });
        p.appendChild(sv('title', {}, `${m.src} → ${m.dst}: ${fmtBytes(m.bytes)}` +
          (m.round !== null ? ` (round ${m.round})` : '') + `, ${fmtDur(m.t1 - m.t0)}`));
        gMsgs.appendChild(p);
      });
    }
    highlight();
    moveCursor(S.t, false);
  }

  // ------------------------------------------------------------ cursor / scrubber
  function moveCursor(t, fromScrub) {
    S.t = Math.max(0, Math.min(END, t));
    const inView = S.t >= S.v0 && S.t <= S.v1;
    cursor.setAttribute('data-t', String(Math.round(S.t)));
    cursor.setAttribute('x1', String(x(S.t)));
    cursor.setAttribute('x2', String(x(S.t)));
    cursor.style.display = inView ? '' : 'none';
    if (!fromScrub) {
      scrub.value = String(Math.round(Math.max(0, Math.min(1, (S.t - S.v0) / (S.v1 - S.v0))) * 1000));
    }
    readout.textContent = fmtAt(S.t);
    for (const [id, rect] of spanEls) rect.classList.toggle('future', D.calls[id].b > S.t);
    for (const p of gMsgs.children) {
      const m = D.messages[Number(p.getAttribute('data-msg'))];
      p.classList.toggle('future', m.t0 > S.t);
      p.classList.toggle('flight', m.t0 <= S.t && S.t < m.t1);
    }
    const doing = D.ranks.map((r) => {
      // a call that never finished is still running at the very end of the trace
      const inside = byRank[r.rank].filter((c) => c.b <= S.t && (S.t < endOf(c) || c.e === null));
      return `rank ${r.rank}: ` + (inside.length ? inside.map((c) => c.label).join(' + ') : 'outside meshcast');
    });
    document.getElementById('now').textContent = `At ${fmtAt(S.t)}: ` + doing.join(' · ');
  }
  scrub.addEventListener('input', () => {
    stop();
    moveCursor(S.v0 + (Number(scrub.value) / 1000) * (S.v1 - S.v0), true);
  });
  svg.addEventListener('click', (ev) => {
    if (ev.target.closest && ev.target.closest('g.call')) return;
    const pt = svg.createSVGPoint();
    pt.x = ev.clientX; pt.y = ev.clientY;
    const p = pt.matrixTransform(svg.getScreenCTM().inverse());
    if (p.x >= GUTTER) moveCursor(tOfX(p.x), false);
  });

  // ------------------------------------------------------------ play (fake-clock friendly)
  const PLAY_MS = 8000;  // the view crosses in 8 s
  function frame(now) {
    if (!S.playing) return;
    const dt = S.last ? now - S.last : 0;
    S.last = now;
    moveCursor(S.t + (dt / PLAY_MS) * (S.v1 - S.v0), false);
    if (S.t >= S.v1 || S.t >= END) { stop(); return; }
    S.raf = requestAnimationFrame(frame);
  }
  function tick() {  // reduced motion: ten still frames, no gliding cursor
    if (!S.playing) return;
    moveCursor(S.t + (S.v1 - S.v0) / 10, false);
    if (S.t >= S.v1 || S.t >= END) { stop(); return; }
    S.timer = setTimeout(tick, 500);
  }
  function start() {
    if (S.t >= Math.min(S.v1, END)) moveCursor(S.v0, false);
    S.playing = true; S.last = 0;
    play.textContent = 'Pause'; play.setAttribute('aria-label', 'pause');
    svg.setAttribute('data-state', 'playing');
    if (reducedMotion()) S.timer = setTimeout(tick, 500);
    else S.raf = requestAnimationFrame(frame);
  }
  function stop() {
    S.playing = false;
    cancelAnimationFrame(S.raf); clearTimeout(S.timer);
    play.textContent = 'Play'; play.setAttribute('aria-label', 'play');
    svg.setAttribute('data-state', 'paused');
  }
  play.addEventListener('click', () => (S.playing ? stop() : start()));

  // ------------------------------------------------------------ zoom
  function setView(a, b) {
    const minSpan = 1000;  // 1 µs
    if (b - a < minSpan) { const m = (a + b) / 2; a = m - minSpan / 2; b = m + minSpan / 2; }
    const pad = 0;
    S.v0 = Math.max(-pad, a); S.v1 = Math.min(END + pad, b);
    if (S.v1 <= S.v0) { S.v0 = 0; S.v1 = END; }
    draw();
  }
  function zoom(f) {
    const c = S.t >= S.v0 && S.t <= S.v1 ? S.t : (S.v0 + S.v1) / 2;
    setView(c - (c - S.v0) * f, c + (S.v1 - c) * f);
  }
  function zoomTo(c) {
    const coll = c.coll === null ? null : D.collectives[c.coll];
    let a = c.b, b = endOf(c);
    if (coll) {
      for (const id of Object.values(coll.calls)) {
        a = Math.min(a, D.calls[id].b); b = Math.max(b, endOf(D.calls[id]));
      }
    }
    const m = (b - a) * 0.25 + 1000;
    setView(a - m, b + m);
  }
  zin.addEventListener('click', () => zoom(0.5));
  zout.addEventListener('click', () => zoom(2));
  fit.addEventListener('click', () => setView(0, END));
  zsel.addEventListener('click', () => { if (S.sel !== null) zoomTo(D.calls[S.sel]); });
  arrowsBox.addEventListener('change', () => { S.arrows = arrowsBox.checked; draw(); });

  // ------------------------------------------------------------ selection + details
  function highlight() {
    const c = S.sel === null ? null : D.calls[S.sel];
    for (const [id, rect] of spanEls) {
      rect.classList.toggle('sel', c !== null && id === c.id);
      rect.classList.toggle('peer', c !== null && c.coll !== null && id !== c.id &&
        D.calls[id].coll === c.coll);
    }
    for (const p of gMsgs.children) {
      const m = D.messages[Number(p.getAttribute('data-msg'))];
      p.classList.toggle('hot', c !== null && ((c.coll !== null && m.coll === c.coll) ||
        m.from === c.id || m.to === c.id));
    }
    for (const tr of document.querySelectorAll('#colls tr[data-coll]')) {
      tr.classList.toggle('current', c !== null && c.coll !== null && tr.getAttribute('data-coll') === String(c.coll));
    }
  }
  function dl(pairs) {
    const d = el('dl', {});
    for (const [k, v, cls] of pairs) {
      if (v === null || v === undefined || v === '') continue;
      d.appendChild(el('dt', {}, k));
      d.appendChild(el('dd', cls ? { class: cls, 'data-field': k } : { 'data-field': k }, String(v)));
    }
    return d;
  }
  function details(c) {
    const sec = document.getElementById('details');
    sec.textContent = '';
    sec.setAttribute('data-call', String(c.id));
    sec.appendChild(el('h2', { id: 'h-details' }, `${c.label} — rank ${c.rank}`));
    const coll = c.coll === null ? null : D.collectives[c.coll];
    const group = D.groups.find((g) => g.name === c.group);
    const dur = c.e === null ? null : c.e - c.b;
    const lane = c.lane ? (c.compiled ? 'tiny-call lane, compiled helper' : 'tiny-call lane') : 'no';
    sec.appendChild(dl([
      ['group', c.group + (group && group.ranks ? ` (ranks ${group.ranks.join(',')})` : '')],
      ['seq', c.seq], ['kind', c.kind],
      ['algorithm', (c.algorithm || '—') + (c.family ? ` (${c.family})` : '')],
      ['bytes', c.bytes === null ? null : `${fmtBytes(c.bytes)} (${c.count} × ${c.dtype})`],
      ['root', c.root], ['peer', c.kind === 'recv' && c.peer === null ? 'any source' : c.peer],
      ['tag', c.tag], ['op', c.op], ['lane', lane], ['async', c.async ? 'yes (returned a Work)' : null],
      ['begin', fmtAt(c.b)], ['end', c.e === null ? 'never finished' : fmtAt(c.e), c.e === null ? 'bad' : ''],
      ['duration', dur === null ? null : fmtDur(dur)],
      ['wait time', c.wait_ns === null ? null : fmtDur(c.wait_ns) + ' (waiting for the rounds\' messages)'],
      ['arrival wait', c.arrival_wait_ns === null || c.arrival_wait_ns === undefined ? null
        : fmtDur(c.arrival_wait_ns) + ' (until the last rank entered)'],
      ['algbw', c.algbw === null ? null : fmtBw(c.algbw)],
      ['busbw', c.busbw === null ? null : `${fmtBw(c.busbw)} (algbw × ${c.factor.toFixed(3)}, nccl-tests' factor for ${c.kind})`],
      ['error', c.error, 'bad'],
    ]));
    const btn = el('button', { type: 'button', class: 'zoom-call' }, 'Zoom to this call');
    btn.addEventListener('click', () => zoomTo(c));
    sec.appendChild(btn);
    if (coll) {
      sec.appendChild(el('h3', {}, `Across ranks: skew ${fmtDur(coll.skew_ns)}`));
      const facts = [];
      if (coll.missing.length) facts.push(`${ranksText(coll.missing)} never entered it`);
      if (coll.mismatch) facts.push('ranks called different things (mismatch)');
      if (coll.unfinished.length) facts.push(`${ranksText(coll.unfinished)} never finished it`);
      if (facts.length) sec.appendChild(el('p', { class: 'bad' }, facts.join('; ')));
      const t = el('table', { class: 'per-rank' });
      const hr = el('tr');
      for (const h of ['rank', 'kind', 'entered', 'after first', 'duration', 'busbw']) hr.appendChild(el('th', {}, h));
      t.appendChild(hr);
      for (const r of coll.members) {
        const id = coll.calls[String(r)];
        const tr = el('tr', { 'data-rank': String(r) });
        if (id === undefined) {
          tr.appendChild(el('td', {}, String(r)));
          tr.appendChild(el('td', { colspan: '5', class: 'bad' }, 'never entered'));
        } else {
          const o = D.calls[id];
          for (const v of [String(r), o.kind, fmtAt(o.b), fmtDur(o.b - coll.first_b),
            o.e === null ? 'never finished' : fmtDur(o.e - o.b), fmtBw(o.busbw)]) tr.appendChild(el('td', {}, v));
          tr.addEventListener('click', () => select(id, false));
        }
        t.appendChild(tr);
      }
      sec.appendChild(t);
    }
    if (c.rounds.length) {
      sec.appendChild(el('h3', {}, `Rounds (${c.rounds.length})`));
      const t = el('table', { class: 'rounds' });
      const hr = el('tr');
      for (const h of ['round', 'send to (bytes)', 'recv from (bytes)', 'wait']) hr.appendChild(el('th', {}, h));
      t.appendChild(hr);
      for (const r of c.rounds) {
        const tr = el('tr');
        const pp = (l) => l.map(([p, b]) => `${p} (${fmtBytes(b)})`).join(', ') || '—';
        for (const v of [String(r.round), pp(r.send), pp(r.recv), fmtDur(r.wait_ns)]) tr.appendChild(el('td', {}, v));
        t.appendChild(tr);
      }
      sec.appendChild(t);
    }
  }
  function select(id, reveal) {
    S.sel = id;
    const c = D.calls[id];
    // revealing a call zooms to it when it is off screen or too thin to read (< 40 px)
    const thin = (endOf(c) - c.b) < ((S.v1 - S.v0) * 40) / (W - GUTTER - RIGHT);
    if (reveal && (c.b > S.v1 || endOf(c) < S.v0 || thin)) zoomTo(c);
    details(c);
    highlight();
    if (reveal) svg.scrollIntoView({ block: 'nearest' });
  }

  // ------------------------------------------------------------ collectives table
  function drawColls() {
    const t = document.getElementById('colls');
    const hr = el('tr');
    for (const h of ['group', 'seq', 'kind', 'algorithm', 'bytes', 'ranks', 'skew', 'slowest', 'busbw']) {
      hr.appendChild(el('th', { scope: 'col' }, h));
    }
    t.appendChild(hr);
    const maxSkew = Math.max(0, ...D.collectives.map((c) => c.skew_ns));
    for (const co of D.collectives.slice(0, 2000)) {
      const tr = el('tr', { tabindex: '0', 'data-coll': String(co.id) });
      if (co.mismatch || co.missing.length || co.unfinished.length) tr.classList.add('bad');
      const cells = [co.group, String(co.seq), co.mismatch ? Object.values(co.kinds).join(' / ') : co.kind,
        co.algorithm || '—', fmtBytes(co.bytes),
        co.missing.length ? `${co.ranks.length}/${co.members.length} (${ranksText(co.missing)} missing)` : String(co.ranks.length),
        fmtDur(co.skew_ns), co.max_dur_ns === null ? 'unfinished' : fmtDur(co.max_dur_ns), fmtBw(co.busbw)];
      cells.forEach((v, i) => {
        const td = el('td', {}, v);
        if (i === 6 && maxSkew > 0 && co.skew_ns === maxSkew) td.classList.add('worst');
        tr.appendChild(td);
      });
      // the latest arrival is the rank the others waited for
      const last = Object.values(co.calls).reduce((a, b) => (D.calls[b].b > D.calls[a].b ? b : a));
      const go = () => select(last, true);
      tr.addEventListener('click', go);
      tr.addEventListener('keydown', (ev) => { if (ev.key === 'Enter' || ev.key === ' ') { ev.preventDefault(); go(); } });
      t.appendChild(tr);
    }
  }

  // ------------------------------------------------------------ keyboard
  svg.addEventListener('keydown', (ev) => {
    const cur = S.sel === null ? null : D.calls[S.sel];
    const rank = cur ? cur.rank : D.ranks.findIndex((r) => !r.missing);
    const list = byRank[rank] || [];
    let handled = true;
    if (ev.key === 'ArrowRight' || ev.key === 'ArrowLeft') {
      const i = cur ? list.indexOf(cur) : -1;
      const j = ev.key === 'ArrowRight' ? i + 1 : (i < 0 ? list.length - 1 : i - 1);
      if (list[j]) select(list[j].id, true);
    } else if (ev.key === 'ArrowUp' || ev.key === 'ArrowDown') {
      const dir = ev.key === 'ArrowDown' ? 1 : -1;
      let r = rank + dir;
      while (r >= 0 && r < byRank.length && !byRank[r].length) r += dir;
      if (r >= 0 && r < byRank.length) {
        const t = cur ? cur.b : S.t;
        const near = byRank[r].reduce((a, b) => (Math.abs(b.b - t) < Math.abs(a.b - t) ? b : a));
        select(near.id, true);
      }
    } else if (ev.key === '+' || ev.key === '=') zoom(0.5);
    else if (ev.key === '-' || ev.key === '_') zoom(2);
    else if (ev.key === '0') setView(0, END);
    else if (ev.key === ' ') { S.playing ? stop() : start(); }
    else if (ev.key === 'Home') moveCursor(S.v0, false);
    else if (ev.key === 'End') moveCursor(S.v1, false);
    else handled = false;
    if (handled) ev.preventDefault();
  });

  // ------------------------------------------------------------ start
  drawBanner();
  drawHang();
  drawLanes();
  drawColls();
  const view = (params.get('view') || '').split(',').map(Number);
  if (view.length === 2 && view.every(Number.isFinite) && view[1] > view[0]) {
    S.v0 = Math.max(0, view[0] * 1e9); S.v1 = Math.min(END, view[1] * 1e9);
    if (S.v1 <= S.v0) { S.v0 = 0; S.v1 = END; }
  }
  const t0 = Number(params.get('t'));
  // the cursor starts at the end: the whole run shown; Play replays it from the left
  S.t = params.has('t') && Number.isFinite(t0) ? t0 * 1e9 : END;
  svg.setAttribute('data-state', 'paused');
  draw();
  const sel = params.get('select');
  if (sel !== null && D.calls[Number(sel)]) select(Number(sel), false);
  document.body.setAttribute('data-ready', '1');
})();
