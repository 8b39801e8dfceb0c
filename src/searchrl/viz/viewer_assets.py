"""The viewer page's stylesheet and script: filtering, sorting, a summary that follows the filter, linkable views."""

_CSS = """
:root { --fg:#1d232a; --muted:#5d6b78; --line:#d5dbe1; --bg:#f6f7f9; --card:#fff; --ok:#1a7f37; --bad:#c62828;
  --warn:#b26a00; --ins:#eef3f8; --insline:#9fb3c8; --q:#fff3b0; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif; color:var(--fg); background:var(--bg); }
[hidden] { display:none !important; }
header.page { background:var(--card); border-bottom:1px solid var(--line); padding:10px 18px 6px; }
header.page h1 { font-size:17px; margin:0 0 6px; }
.summary { display:flex; flex-wrap:wrap; gap:6px 18px; margin:4px 0; }
.summary .stat b { font-variant-numeric:tabular-nums; }
.notice { color:var(--warn); margin:4px 0; }
.controls { position:sticky; top:0; z-index:2; display:flex; flex-wrap:wrap; gap:8px 14px; align-items:center;
  padding:8px 18px; background:var(--card); border-bottom:1px solid var(--line); }
.controls input[type=search] { width:280px; padding:4px 6px; }
table.groups { border-collapse:collapse; margin:6px 0; font-size:13px; }
table.groups td, table.groups th { border:1px solid var(--line); padding:2px 8px; text-align:right; }
table.groups td:first-child, table.groups th:first-child { text-align:left; }
main { padding:12px 18px; max-width:1200px; }
article.traj { background:var(--card); border:1px solid var(--line); border-left:5px solid var(--line);
  border-radius:6px; margin:0 0 14px; padding:10px 14px; }
article.traj.correct { border-left-color:var(--ok); }
article.traj.wrong { border-left-color:var(--bad); }
.traj-head h2 { font-size:15px; margin:0 0 4px; }
.meta { display:flex; flex-wrap:wrap; gap:2px 16px; color:var(--muted); font-size:13px; }
.meta b { color:var(--fg); font-weight:600; }
.badge { display:inline-block; padding:0 6px; border-radius:8px; font-size:12px; font-weight:600; color:#fff; }
.badge.ok { background:var(--ok); } .badge.bad { background:var(--bad); } .badge.na { background:var(--muted); }
.badge.inv { background:var(--warn); }
ol.turns { list-style:none; margin:8px 0 0; padding:0; }
li.turn { border-top:1px dashed var(--line); padding:6px 0; }
.turn-label { color:var(--muted); font-size:12px; margin-bottom:2px; }
li.turn.invalid .turn-label { color:var(--warn); font-weight:600; }
.invalid-reason { color:var(--warn); font-weight:600; margin:2px 0; }
pre { white-space:pre-wrap; word-break:break-word; margin:2px 0; font:13px/1.4 ui-monospace,Menlo,Consolas,monospace; }
pre.policy { color:var(--fg); }
mark.q { background:var(--q); padding:0 1px; }
.queries { margin:3px 0; }
.query { display:inline-block; background:var(--q); border:1px solid #e2cc55; border-radius:4px; padding:0 5px;
  margin:1px 4px 1px 0; font-family:ui-monospace,Menlo,Consolas,monospace; font-size:12.5px; }
.hits { color:var(--muted); font-size:12px; }
details.inserted { background:var(--ins); border:1px solid var(--insline); border-radius:4px; margin:4px 0;
  padding:2px 8px; }
details.inserted summary { cursor:pointer; color:var(--muted); font-size:12px; }
pre.inserted { color:#4a5a6a; }
pre.inserted.doc { border-top:1px solid var(--insline); padding-top:4px; margin-top:4px; }
pre.inserted.doc:first-of-type { border-top:none; }
.summary.filtered .stat b { color:var(--warn); }
.legend { display:flex; flex-wrap:wrap; gap:4px 10px; margin:6px 0 2px; font-size:12px; color:var(--muted); }
.legend > * { padding:0 6px; border-radius:4px; }
.legend .policy-key { border:1px solid var(--line); color:var(--fg); }
.legend .inserted-key { background:var(--ins); border:1px solid var(--insline); }
.blk.evidence { background:#e6f4ea; outline:1px solid #8cc59a; }
.blk.internal { background:#f1e8fb; outline:1px solid #b89ad8; }
.clipped { color:var(--warn); font-size:12px; margin:2px 0; }
/* model and document text never reorders the text around it (bidirectional controls stay inside their field) */
pre, .question, .meta span, .query, .hits, td, summary, .turn-label, .invalid-reason { unicode-bidi:isolate; }
details.extra summary { cursor:pointer; color:var(--muted); font-size:12px; }
"""

_JS = """
(function () {
  var box = document.getElementById('records');
  var arts = Array.prototype.slice.call(box.querySelectorAll('article.traj'));
  var texts = arts.map(function (a) { return a.textContent.toLowerCase(); });
  var q = document.getElementById('filter'), oc = document.getElementById('only-correct'),
      ow = document.getElementById('only-wrong'), oi = document.getElementById('only-invalid'),
      sort = document.getElementById('sort'), count = document.getElementById('visible');
  function apply() {
    var needle = q.value.trim().toLowerCase(), n = 0;
    arts.forEach(function (a, i) {
      var ok = (!needle || texts[i].indexOf(needle) >= 0) && (!oc.checked || a.dataset.correct === '1') &&
        (!ow.checked || a.dataset.correct === '0') && (!oi.checked || a.dataset.invalid === '1');
      a.hidden = !ok; if (ok) n++;
    });
    count.textContent = n + ' of ' + arts.length + ' shown';
    summarize(needle || oc.checked || ow.checked || oi.checked);
  }
  var summary = document.getElementById('summary'), stats = {};
  summary.querySelectorAll('.stat[data-stat]').forEach(function (s) {
    var b = s.querySelector('b'); stats[s.dataset.stat] = {b: b, all: b.textContent};
  });
  var note = document.createElement('span'); note.className = 'stat'; summary.appendChild(note);
  function mean(xs) { return xs.length ? xs.reduce(function (a, b) { return a + b; }, 0) / xs.length : NaN; }
  function fmt(x, pct, digits) {
    if (isNaN(x)) return '-';
    return pct ? (100 * x).toFixed(1) + '%' : x.toFixed(digits === undefined ? 3 : digits);
  }
  function summarize(filtered) {
    summary.classList.toggle('filtered', filtered);
    if (!filtered) {
      Object.keys(stats).forEach(function (k) { stats[k].b.textContent = stats[k].all; });
      note.textContent = ''; return;
    }
    var vis = arts.filter(function (a) { return !a.hidden; });
    function col(key) {
      return vis.map(function (a) { return num(a, key); }).filter(function (x) { return !isNaN(x); });
    }
    var values = {n: String(vis.length), em: fmt(mean(col('em'))), f1: fmt(mean(col('f1'))),
      correct: fmt(mean(col('correct')), true),
      answered: fmt(mean(col('answered')), true), searches: fmt(mean(col('searches')), false, 2),
      turns: fmt(mean(col('turns')), false, 2), invalid: fmt(mean(col('invalid')), true),
      reward: fmt(mean(col('reward')))};
    // the failure shares are not recomputed per filter: '-' rather than the totals of every record
    Object.keys(stats).forEach(function (k) { stats[k].b.textContent = k in values ? values[k] : '-'; });
    note.textContent = '(over the ' + vis.length + ' records the filter shows)';
  }
  function num(a, key) { var v = a.dataset[key]; return v === '' || v === undefined ? NaN : parseFloat(v); }
  function reorder() {
    var parts = sort.value.split(':'), key = parts[0], dir = parts[1] === 'desc' ? -1 : 1;
    var order = arts.slice().sort(function (a, b) {
      if (key === 'order') return num(a, 'order') - num(b, 'order');
      var x = num(a, key), y = num(b, key);
      if (isNaN(x) && isNaN(y)) return num(a, 'order') - num(b, 'order');
      if (isNaN(x)) return 1; if (isNaN(y)) return -1;
      return (x - y) * dir || num(a, 'order') - num(b, 'order');
    });
    order.forEach(function (a) { box.appendChild(a); });
  }
  oc.addEventListener('change', function () { if (oc.checked) ow.checked = false; apply(); });
  ow.addEventListener('change', function () { if (ow.checked) oc.checked = false; apply(); });
  oi.addEventListener('change', apply);
  q.addEventListener('input', apply);
  sort.addEventListener('change', reorder);
  function toggle(open) {
    box.querySelectorAll('details.inserted').forEach(function (d) { d.open = open; });
  }
  document.getElementById('expand').addEventListener('click', function () { toggle(true); });
  document.getElementById('collapse').addEventListener('click', function () { toggle(false); });
  // A view can be linked: page.html#sort=reward:desc&q=london&only=wrong&expand=1
  var params = {};
  location.hash.replace(/^#/, '').split('&').forEach(function (kv) {
    var i = kv.indexOf('=');
    if (i > 0) { try { params[kv.slice(0, i)] = decodeURIComponent(kv.slice(i + 1)); } catch (e) { /* bad link */ } }
  });
  if (params.q) q.value = params.q;
  if (params.only === 'correct') oc.checked = true;
  if (params.only === 'wrong') ow.checked = true;
  if (params.only === 'invalid') oi.checked = true;
  if (params.sort && Array.prototype.some.call(sort.options, function (o) { return o.value === params.sort; })) {
    sort.value = params.sort; reorder();
  }
  if (params.expand === '1') toggle(true);
  apply();
})();
"""
