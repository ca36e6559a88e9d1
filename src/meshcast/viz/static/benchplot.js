/* meshcast bench plot page: the charts are inline SVG written by Python; this script adds
 * a checkbox per library (hides its lines and points) and, per collective, a table of the
 * numbers from the inline JSON. Plain ES2020, no library, no network; data reaches the
 * DOM only through textContent/setAttribute. Test hook: body[data-ready=1]. */
(function () {
  'use strict';
  const DATA = JSON.parse(document.getElementById('bench-data').textContent);
  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function fmt(v, digits) { return v === null || v === undefined ? 'N/A' : Number(v).toFixed(digits); }

  const libs = document.getElementById('libs');
  DATA.libraries.forEach(lib => {
    const lab = el('label');
    const box = el('input', { type: 'checkbox', 'data-lib': lib.name });
    box.checked = true;
    box.addEventListener('change', () => {
      for (const e of document.querySelectorAll('svg [data-lib]')) {
        if (e.getAttribute('data-lib') === lib.name) e.setAttribute('data-hidden', box.checked ? '0' : '1');
      }
    });
    lab.append(box, el('i', { style: 'border-color:' + lib.color }), document.createTextNode(lib.name));
    libs.appendChild(lab);
  });

  for (const op of DATA.ops) {
    const sec = document.getElementById('op-' + op.name);
    if (!sec) continue;
    const det = el('details', { class: 'numbers' });
    det.appendChild(el('summary', {}, 'numbers (' + op.placement + ')'));
    const t = el('table', { class: 'nums', 'data-op': op.name });
    const head = el('tr');
    head.appendChild(el('th', { scope: 'col' }, 'size (B)'));
    for (const s of op.series) {
      head.appendChild(el('th', { scope: 'col' }, s.library + ' µs'));
      head.appendChild(el('th', { scope: 'col' }, 'busbw GB/s'));
    }
    t.appendChild(head);
    const sizes = [...new Set(op.series.flatMap(s => s.points.map(p => p[0])))].sort((a, b) => a - b);
    for (const size of sizes) {
      const tr = el('tr');
      tr.appendChild(el('td', {}, String(size)));
      for (const s of op.series) {
        const p = s.points.find(q => q[0] === size);
        tr.appendChild(el('td', {}, p ? fmt(p[2], 2) : ''));
        tr.appendChild(el('td', {}, p ? fmt(p[1], 3) : ''));
      }
      t.appendChild(tr);
    }
    det.appendChild(t);
    sec.appendChild(det);
  }
  document.body.setAttribute('data-ready', '1');
})();
