"""The report page's inline style sheet and script (constants; no templating, no external files).

The script reads `#report-data`, lists and filters the failures and draws one as SVG with DOM calls only;
it makes no request and stores nothing.
"""

from __future__ import annotations

PAGE_CSS = """
:root{--fg:#1d2430;--muted:#667085;--line:#d0d5dd;--bg:#fff;--soft:#f5f7fa;--accent:#2f6fed;--bad:#d92d20;
--ok:#12b76a;--warn:#f79009}
*{box-sizing:border-box}body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;
color:var(--fg);background:var(--bg)}
header{padding:14px 20px;border-bottom:1px solid var(--line);background:var(--soft)}
.banner{margin:12px 20px 0;padding:10px 14px;border:2px solid var(--warn);border-radius:6px;background:#fffaeb;
font-weight:600}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:22px 0 8px}h3{font-size:14px;margin:14px 0 6px}
.meta span{margin-right:16px;color:var(--muted)}main{padding:4px 20px 40px}.muted{color:var(--muted)}
table.grid{border-collapse:collapse;margin:4px 0}table.grid th,table.grid td{border:1px solid var(--line);
padding:3px 8px;text-align:left;vertical-align:top}table.grid th{background:var(--soft);font-weight:600}
td.num{text-align:right;font-variant-numeric:tabular-nums}
table.grid caption{caption-side:top;text-align:left;color:var(--muted);padding:0 0 2px}
svg.bar .track{fill:#eef1f5}svg.bar .fill{fill:var(--accent)}svg.bar .fill.blame{fill:var(--bad)}
svg.bar .ci{stroke:#101828;stroke-width:1.5}
svg.chart .gridline{stroke:#eef1f5}svg.chart .axis{font-size:11px;fill:var(--muted)}
svg.chart .line{fill:none;stroke-width:2}svg.chart .line.dev{stroke:var(--accent)}
svg.chart .line.train{stroke:var(--warn)}
svg.chart .dot.dev{stroke:var(--accent);fill:var(--accent)}svg.chart .dot.train{stroke:var(--warn);fill:var(--warn)}
svg.chart .ci{stroke:var(--accent);stroke-opacity:.35;stroke-width:6}
.legend .key{display:inline-block;width:12px;height:4px;margin:0 4px 2px 10px}.key.dev{background:var(--accent)}
.key.train{background:var(--warn)}pre{white-space:pre-wrap;word-break:break-word;margin:4px 0}
pre.diff{background:var(--soft);padding:8px;border:1px solid var(--line);max-height:420px;overflow:auto}
pre.diff .add{color:#067647;background:#ecfdf3}pre.diff .del{color:#b42318;background:#fef3f2}
details.rewrite{margin:6px 0}details.rewrite summary{cursor:pointer;font-weight:600}
.filters label{margin-right:14px}.filters select{margin-left:4px}
.split{display:flex;gap:16px;align-items:flex-start;margin-top:8px}.list{flex:0 0 40%;max-height:80vh;overflow:auto}
.detail{flex:1 1 60%;min-width:0}#failure-list tbody tr{cursor:pointer}#failure-list tbody tr:hover{background:#eef4ff}
#failure-list tbody tr.selected{background:#dbe7fe}dl.kv{display:grid;grid-template-columns:max-content 1fr;
gap:2px 12px;margin:4px 0}dl.kv dt{font-weight:600;color:var(--muted)}dl.kv dd{margin:0;white-space:pre-wrap;
word-break:break-word}.drawing{overflow:auto;border:1px solid var(--line);background:#fcfcfd;max-height:520px}
svg.graph .node rect{fill:#fff;stroke:#98a2b3;stroke-width:1}svg.graph .node{cursor:pointer}
svg.graph .node text{font-size:11px;fill:var(--fg);pointer-events:none}
svg.graph .node.op rect{fill:#f2f4f7;rx:10}svg.graph .node.kind-turn rect{fill:#fffaeb;stroke:#fdb022}
svg.graph .node.kind-memory rect,svg.graph .node.kind-chunk rect,svg.graph .node.kind-buffer rect,
svg.graph .node.kind-episode rect,svg.graph .node.kind-event rect{fill:#f0f9ff;stroke:#36bffa}
svg.graph .node.kind-answer rect,svg.graph .node.kind-context rect{fill:#f4f3ff;stroke:#7a5af8}
svg.graph .node.role-evidence rect{stroke-width:2.5}svg.graph .node.failed rect{stroke-dasharray:4 2}
svg.graph .node.suspect rect{stroke:var(--warn);stroke-width:2.5}
svg.graph .node.role-named rect{stroke:var(--bad);stroke-width:2.5;stroke-dasharray:6 2}
svg.graph .node.blamed rect{fill:#fee4e2;stroke:var(--bad);stroke-width:3}
svg.graph .node.selected rect{stroke:var(--accent);stroke-width:3}
svg.graph .edge{fill:none;stroke:#98a2b3;stroke-width:1.2}svg.graph .vedge{fill:none;stroke:#36bffa;
stroke-dasharray:5 3;stroke-width:1.2}#node-panel{margin-top:8px;border-top:1px solid var(--line)}
.pill{display:inline-block;padding:0 6px;border-radius:8px;font-size:12px;background:#eef1f5}
.pill.verified{background:#dcfae6}.pill.refuted{background:#fee4e2}.pill.unverifiable{background:#f2f4f7}
"""

PAGE_JS = r"""
(function () {
  'use strict';
  var NS = 'http://www.w3.org/2000/svg';
  var data = JSON.parse(document.getElementById('report-data').textContent);
  var failures = data.failures;
  var NODE_W = 132, NODE_H = 34;

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    return e;
  }
  function svg(tag, attrs) {
    var e = document.createElementNS(NS, tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, String(attrs[k])); });
    return e;
  }
  function safeClass(s) { return String(s).replace(/[^A-Za-z0-9_-]/g, '_'); }
  function verifiedOf(f) { return f.attr ? f.attr.check : 'none'; }
  function short(s, n) { s = String(s); return s.length > n ? s.slice(0, n - 1) + '\u2026' : s; }

  function fillSelect(id, values) {
    var select = document.getElementById(id);
    values.forEach(function (v) { var o = el('option', null, v); o.value = v; select.appendChild(o); });
    select.addEventListener('change', renderList);
  }
  function distinct(get) {
    var seen = {};
    failures.forEach(function (f) { var v = get(f); if (v) { seen[v] = true; } });
    return Object.keys(seen).sort();
  }
  fillSelect('f-stage', distinct(function (f) { return f.attr && f.attr.stage; }));
  fillSelect('f-type', distinct(function (f) { return f.attr && f.attr.type; }));
  document.getElementById('f-verified').addEventListener('change', renderList);

  function matches(f) {
    var stage = document.getElementById('f-stage').value;
    var type = document.getElementById('f-type').value;
    var verified = document.getElementById('f-verified').value;
    if (stage && !(f.attr && f.attr.stage === stage)) { return false; }
    if (type && !(f.attr && f.attr.type === type)) { return false; }
    if (verified && verifiedOf(f) !== verified) { return false; }
    return true;
  }

  function renderList() {
    var body = document.querySelector('#failure-list tbody');
    while (body.firstChild) { body.removeChild(body.firstChild); }
    var shown = 0;
    failures.forEach(function (f, i) {
      if (!matches(f)) { return; }
      shown += 1;
      var tr = el('tr', 'failure');
      tr.setAttribute('data-index', String(i));
      tr.setAttribute('data-qid', f.qid);
      tr.appendChild(el('td', null, short(f.question, 90)));
      tr.appendChild(el('td', null, f.category));
      tr.appendChild(el('td', null, f.verdict));
      tr.appendChild(el('td', null, f.attr ? f.attr.stage : ''));
      tr.appendChild(el('td', null, f.attr ? f.attr.type : ''));
      tr.appendChild(el('td', null, verifiedOf(f)));
      tr.addEventListener('click', function () { show(i, tr); });
      body.appendChild(tr);
    });
    document.getElementById('f-count').textContent = shown + ' of ' + failures.length + ' shown';
  }

  function kv(dl, key, value) {
    if (value === undefined || value === null || value === '') { return; }
    dl.appendChild(el('dt', null, key));
    dl.appendChild(el('dd', null, value));
  }

  function show(i, row) {
    var f = failures[i];
    Array.prototype.forEach.call(document.querySelectorAll('#failure-list tr.selected'), function (r) {
      r.classList.remove('selected');
    });
    if (row) { row.classList.add('selected'); }
    var detail = document.getElementById('detail');
    while (detail.firstChild) { detail.removeChild(detail.firstChild); }
    detail.setAttribute('data-qid', f.qid);
    detail.appendChild(el('h3', null, f.qid));
    var dl = el('dl', 'kv');
    kv(dl, 'question', f.question);
    kv(dl, 'gold', f.gold);
    kv(dl, 'answer', f.answer);
    kv(dl, 'verdict', f.verdict);
    kv(dl, 'category', f.category);
    kv(dl, 'error', f.error);
    kv(dl, 'evidence', f.evidence.join(', '));
    detail.appendChild(dl);
    detail.appendChild(el('h3', null, 'Attribution'));
    if (f.attr) {
      var a = el('dl', 'kv');
      kv(a, 'error type', f.attr.type);
      kv(a, 'stage', f.attr.stage + ' (' + f.attr.tunable + ')');
      kv(a, 'operation', f.attr.op_name + ' ' + f.attr.op);
      kv(a, 'reason', f.attr.reason);
      kv(a, 'verified', verifiedOf(f));
      kv(a, 'method', f.attr.method + ', confidence ' + f.attr.confidence);
      if (f.attr.joint.length) { kv(a, 'joint causes', f.attr.joint.join('; ')); }
      if (f.attr.pseudo) { kv(a, 'evidence', f.attr.evidence.join(', ') + ' (found, not given)'); }
      detail.appendChild(a);
    } else {
      detail.appendChild(el('p', 'muted', 'Not attributed.'));
    }
    detail.appendChild(el('h3', null, 'Path from the evidence to the answer'));
    if (!f.graph) {
      detail.appendChild(el('p', 'muted', 'No graph for this conversation.'));
      return;
    }
    if (f.graph.note) { detail.appendChild(el('p', 'muted', f.graph.note)); }
    var elided = Object.keys(f.graph.elided);
    if (elided.length) {
      detail.appendChild(el('p', 'muted', 'Not drawn: ' + elided.map(function (k) {
        return f.graph.elided[k] + ' ' + k;
      }).join(', ') + '.'));
    }
    var box = el('div', 'drawing');
    var panel = el('div');
    panel.id = 'node-panel';
    box.appendChild(drawing(f, panel));
    detail.appendChild(box);
    panel.appendChild(el('p', 'muted', 'Click a node to read its value.'));
    detail.appendChild(panel);
    // bring the blamed operation into view, with the memory units its reason names (left of it)
    var focus = f.graph.nodes.filter(function (n) { return n[3] === 'blamed' || n[3] === 'named'; });
    if (focus.length) {
      box.scrollLeft = Math.max(0, Math.min.apply(null, focus.map(function (n) { return n[1]; })) - NODE_W);
    }
  }

  function drawing(f, panel) {
    var g = f.graph;
    var table = data.nodes[f.conv] || {};
    var root = svg('svg', {'class': 'graph', width: g.w, height: g.h, viewBox: '0 0 ' + g.w + ' ' + g.h});
    var defs = svg('defs', {});
    var marker = svg('marker', {id: 'arrow', viewBox: '0 0 10 10', refX: 10, refY: 5, markerWidth: 7,
      markerHeight: 7, orient: 'auto-start-reverse'});
    marker.appendChild(svg('path', {d: 'M 0 0 L 10 5 L 0 10 z', fill: '#98a2b3'}));
    defs.appendChild(marker);
    root.appendChild(defs);
    var at = {};
    g.nodes.forEach(function (n) { at[n[0]] = n; });
    function link(pair, cls) {
      var s = at[pair[0]], t = at[pair[1]];
      if (!s || !t) { return; }
      var x1 = s[1] + NODE_W, y1 = s[2] + NODE_H / 2, x2 = t[1], y2 = t[2] + NODE_H / 2;
      if (x2 <= x1) { x1 = s[1] + NODE_W / 2; y1 = s[2] + NODE_H; x2 = t[1] + NODE_W / 2; y2 = t[2]; }
      var mx = (x1 + x2) / 2;
      var d = 'M' + x1 + ',' + y1 + ' C' + mx + ',' + y1 + ' ' + mx + ',' + y2 + ' ' + x2 + ',' + y2;
      root.appendChild(svg('path', {'class': cls, d: d, 'marker-end': 'url(#arrow)'}));
    }
    g.edges.forEach(function (e) { link(e, 'edge'); });
    g.vedges.forEach(function (e) { link(e, 'vedge'); });
    g.nodes.forEach(function (n) {
      var info = table[n[0]] || ['?', n[0], ''];
      var kind = info[0], label = info[1], value = info[2];
      var cls = 'node ' + (kind === 'op' ? 'op' : 'var kind-' + safeClass(kind)) + ' role-' + safeClass(n[3]);
      if (n[3] === 'blamed') { cls += ' blamed'; }
      if (n[3] === 'suspect') { cls += ' suspect'; }
      if (n[4]) { cls += ' failed'; }
      var node = svg('g', {'class': cls, transform: 'translate(' + n[1] + ',' + n[2] + ')', tabindex: 0});
      node.setAttribute('data-id', n[0]);
      var title = svg('title', {});
      title.textContent = label + '\n' + short(value, 600);
      node.appendChild(title);
      node.appendChild(svg('rect', {width: NODE_W, height: NODE_H, rx: kind === 'op' ? 12 : 3}));
      var t1 = svg('text', {x: 6, y: 14});
      t1.textContent = short(label, 21);
      node.appendChild(t1);
      var t2 = svg('text', {x: 6, y: 28, 'class': 'sub'});
      t2.textContent = short(kind === 'op' ? value.split(' \u2014 ')[1] || '' : value, 21);
      node.appendChild(t2);
      node.addEventListener('click', function () { select(root, node, n, info, panel); });
      root.appendChild(node);
    });
    return root;
  }

  function select(root, node, n, info, panel) {
    Array.prototype.forEach.call(root.querySelectorAll('.node.selected'), function (s) {
      s.classList.remove('selected');
    });
    node.classList.add('selected');
    while (panel.firstChild) { panel.removeChild(panel.firstChild); }
    panel.appendChild(el('h3', null, info[1]));
    var dl = el('dl', 'kv');
    kv(dl, 'id', n[0]);
    kv(dl, 'kind', info[0]);
    kv(dl, 'role', n[3]);
    dl.appendChild(el('dt', null, 'value'));
    var dd = el('dd');
    dd.appendChild(el('pre', 'value', info[2]));
    dl.appendChild(dd);
    panel.appendChild(dl);
  }

  renderList();
}());
"""
