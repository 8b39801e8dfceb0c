"""A static HTML viewer for trajectories: one self-contained file (inline CSS and a little vanilla JS, no network).

Every writer emits one record format (:mod:`searchrl.rollout.record`): ``{"source", "score", "metrics",
"trajectory"}`` plus its own fields (training rollouts add ``step``; evaluation prediction rows,
``searchrl.eval.harness.item_row``, add question, golds, prediction, and their ``trajectory`` is a full trajectory
(agent), a retrieval trace (RAG baselines) or None (direct)). Files written by earlier releases hold bare
trajectories (``Trajectory.to_dict()``) or ``{"step", "reward", "trajectory"}`` rows; they are read as well.

Everything is rendered from the turns' text (no tokenizer needed); model output is untrusted and always escaped.
A row's verdict is the writer's own ``metrics.correct`` (its run's :class:`searchrl.rewards.correctness.Correctness`)
when present, else exact match; EM and F1 are recomputed from the final answer and the golds, so every file shows
them alike.

>>> from searchrl.viz.viewer import write_viewer
>>> write_viewer(["runs/demo/before.jsonl"])  # doctest: +SKIP
PosixPath('runs/demo/before.html')
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import Any

from searchrl.utils import atomic_write_text
from searchrl.viz.records import (  # noqa: F401  (ViewRecord, load_records, summarize: re-exported)
    COLLAPSE_CHARS,
    COLLAPSE_LINES,
    DEFAULT_LIMIT,
    ViewRecord,
    ViewTurn,
    _opt_float,
    _str,
    _str_list,
    load_records,
    parse_row,
    summarize,
)

# ------------------------------------------------------------------------------------------------ rendering

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
      answered: fmt(mean(col('answered')), true), searches: fmt(mean(col('searches')), false, 2),
      turns: fmt(mean(col('turns')), false, 2), invalid: fmt(mean(col('invalid')), true),
      reward: fmt(mean(col('reward')))};
    Object.keys(stats).forEach(function (k) { if (k in values) stats[k].b.textContent = values[k]; });
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
    var i = kv.indexOf('='); if (i > 0) params[kv.slice(0, i)] = decodeURIComponent(kv.slice(i + 1));
  });
  if (params.q) q.value = params.q;
  if (params.only === 'correct') oc.checked = true;
  if (params.only === 'wrong') ow.checked = true;
  if (params.only === 'invalid') oi.checked = true;
  if (params.sort && sort.querySelector('option[value="' + params.sort + '"]')) {
    sort.value = params.sort; reorder();
  }
  if (params.expand === '1') toggle(true);
  apply();
})();
"""


def _e(x: Any) -> str:
    return escape(_str(x), quote=True)


def _fmt(x: float | None, pct: bool = False, digits: int = 3) -> str:
    """``0.5`` -> ``0.5``, ``1/3`` -> ``0.333``; with ``pct``, ``0.5`` -> ``50.0%``; None -> ``n/a``."""
    if x is None:
        return "n/a"
    if pct:
        return f"{100 * x:.1f}%"
    text = f"{x:.{digits}f}".rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _highlight(text: str, queries: Sequence[str]) -> str:
    """Escaped ``text`` with every occurrence of a query wrapped in ``<mark class="q">``."""
    needles = sorted({q for q in queries if q.strip()}, key=len, reverse=True)
    if not needles:
        return _e(text)
    out, i = [], 0
    while i < len(text):
        best = None
        for q in needles:
            j = text.find(q, i)
            if j >= 0 and (best is None or j < best[0]):
                best = (j, q)
        if best is None:
            break
        j, q = best
        out.append(_e(text[i:j]))
        out.append(f'<mark class="q">{_e(q)}</mark>')
        i = j + len(q)
    out.append(_e(text[i:]))
    return "".join(out)


def _verdict(rec: ViewRecord) -> tuple[str, str]:
    """(css class of the article, badge html)."""
    em = rec.em
    if em is None:
        return "unscored", '<span class="badge na">no golds</span>'
    f1 = rec.f1
    if (rec.correct if rec.correct is not None else em) >= 1.0:
        return "correct", f'<span class="badge ok">correct</span> EM {em:g} · F1 {_fmt(f1)}'
    return "wrong", f'<span class="badge bad">wrong</span> EM {em:g} · F1 {_fmt(f1)}'


#: where a retrieved document starts inside an observation ("Doc 2(Title: ...)", Search-R1's format and ours).
_DOC_START = re.compile(r"(?=\bDoc \d+\s*\(Title:)")


def split_documents(text: str) -> list[str]:
    """An observation cut at each ``Doc k(Title: ...)``; text without documents is one part.

    >>> split_documents("<information>Doc 1(Title: A) a. Doc 2(Title: B) b.</information>")
    ['<information>', 'Doc 1(Title: A) a. ', 'Doc 2(Title: B) b.</information>']
    """
    return [part for part in _DOC_START.split(text) if part]


def _observation(text: str, n_tokens: int, label: str = "inserted") -> str:
    lines = text.count("\n") + 1
    long = len(text) > COLLAPSE_CHARS or lines > COLLAPSE_LINES
    size = f"{n_tokens} tokens, " if n_tokens else ""
    docs = split_documents(text)
    n_docs = sum(1 for d in docs if _DOC_START.match(d))
    body = "".join(f'<pre class="inserted{" doc" if _DOC_START.match(d) else ""}">{_e(d.strip())}</pre>' for d in docs)
    return (
        f'<details class="inserted"{"" if long else " open"}><summary>{_e(label)} ({size}{len(text)} chars'
        f"{f', {n_docs} documents' if n_docs else ''})</summary>{body}</details>"
    )


def _queries(queries: Sequence[str], hit_ids: Sequence[Sequence[str]]) -> str:
    if not queries:
        return ""
    items = []
    for k, q in enumerate(queries):
        hits = hit_ids[k] if k < len(hit_ids) else []
        hit_html = f' <span class="hits">→ {_e(", ".join(hits))}</span>' if hits else ""
        items.append(f'<span class="query">{_e(q)}</span>{hit_html}')
    return f'<div class="queries">query: {" ".join(items)}</div>'


def _turn_html(i: int, t: ViewTurn) -> str:
    cls = f"turn action-{_e(t.action)}" + (" invalid" if t.action == "invalid" else "")
    label = [f"turn {i}", t.action]
    if t.finish_reason:
        label.append(f"finish: {t.finish_reason}")
    label.append(f"{t.n_gen_tokens} policy tokens")
    if t.timings:
        label.append(", ".join(f"{k} {float(v):.3g}" for k, v in t.timings.items()))
    parts = [f'<li class="{cls}"><div class="turn-label">{_e(" · ".join(label))}</div>']
    parts.append(f'<pre class="policy">{_highlight(t.text, t.queries)}</pre>')
    if t.action == "invalid" or t.invalid_reason:
        parts.append(f'<div class="invalid-reason">⚠ invalid: {_e(t.invalid_reason or "(no reason given)")}</div>')
    parts.append(_queries(t.queries, t.hit_ids))
    if t.observation:
        parts.append(_observation(t.observation, t.n_obs_tokens))
    parts.append("</li>")
    return "".join(parts)


def _json_block(label: str, value: Any, limit: int = 6000) -> str:
    text = json.dumps(value, ensure_ascii=False, indent=1, default=str)
    if len(text) > limit:
        text = text[:limit] + f"\n… ({len(text) - limit} more characters)"
    return f'<details class="extra"><summary>{_e(label)}</summary><pre>{_e(text)}</pre></details>'


def _trace_html(rec: ViewRecord) -> str:
    """A non-agent eval row: the model output, the retrieval trace and any context text."""
    parts = []
    tr = rec.trace
    queries = _str_list(tr.get("queries")) if isinstance(tr.get("queries"), list) else []
    hits = tr.get("hit_ids") if isinstance(tr.get("hit_ids"), list) else []
    if queries:
        parts.append(
            f'<li class="turn action-retrieve"><div class="turn-label">retrieval</div>'
            f"{_queries(queries, [_str_list(h) for h in hits])}</li>"
        )
    for k, ctx in enumerate(rec.context, 1):
        parts.append(f'<li class="turn action-context">{_observation(ctx, 0, f"context {k}")}</li>')
    steps = tr.get("steps") if isinstance(tr.get("steps"), list) else []
    for k, st in enumerate(steps, 1):
        if not isinstance(st, dict):
            continue
        q = _str(st.get("query"))
        parts.append(
            f'<li class="turn action-step"><div class="turn-label">step {k}</div>'
            f'<pre class="policy">{_e(st.get("sentence"))}</pre>'
            f"{_queries([q] if q else [], [_str_list(st.get('hit_ids'))])}</li>"
        )
    if rec.raw:
        parts.append(
            f'<li class="turn action-output"><div class="turn-label">model output</div>'
            f'<pre class="policy">{_e(rec.raw)}</pre></li>'
        )
    rest = {k: v for k, v in tr.items() if k not in ("queries", "hit_ids", "steps")}
    if rest:
        parts.append(f'<li class="turn">{_json_block("trace", rest)}</li>')
    if not parts:
        parts.append('<li class="turn"><div class="turn-label">no model output or trace in this row</div></li>')
    return "".join(parts)


def _record_html(idx: int, rec: ViewRecord) -> str:
    cls, badge = _verdict(rec)
    c = rec.counts
    data = {
        "order": str(idx),
        "step": "" if rec.step is None else str(rec.step),
        "reward": "" if rec.reward is None else repr(rec.reward),
        "f1": "" if rec.f1 is None else repr(rec.f1),
        "searches": str(c.get("searches", 0)),
        "correct": {"correct": "1", "wrong": "0"}.get(cls, ""),
        "invalid": "1" if rec.n_invalid > 0 else "0",
        "em": "" if rec.em is None else repr(rec.em),
        "answered": "1" if rec.answered else "0",
        "turns": str(c.get("turns", 0)),
    }
    attrs = " ".join(f'data-{k}="{_e(v)}"' for k, v in data.items())
    meta = [
        f"<span>{badge}</span>",
        f"<span><b>golds:</b> {_e(' | '.join(rec.golds)) if rec.golds else '(none)'}</span>",
        f"<span><b>answer:</b> {_e(rec.answer) if rec.answer is not None else '<i>(none)</i>'}</span>",
    ]
    if rec.stop_reason:
        meta.append(f"<span><b>stop:</b> {_e(rec.stop_reason)}</span>")
    queries = _plural(c.get("queries", 0), "query", "queries")
    meta.append(
        f"<span><b>searches:</b> {c.get('searches', 0)} ({queries}) · <b>turns:</b> "
        f"{c.get('turns', 0)} · <b>tokens:</b> {c.get('policy_tokens', 0)} policy / "
        f"{c.get('inserted_tokens', 0)} inserted</span>"
    )
    if rec.n_invalid:
        meta.append(f'<span class="badge inv">{rec.n_invalid} invalid</span>')
    if rec.step is not None:
        meta.append(f"<span><b>step:</b> {rec.step}</span>")
    if rec.reward is not None:
        comps = ", ".join(f"{_e(k)} {_e(_fmt(_opt_float(v)) if _opt_float(v) is not None else v)}"
                          for k, v in rec.reward_components.items())  # fmt: skip
        label = "reward" if rec.kind == "rollout" else "score"  # an evaluation row's reward is its score
        meta.append(f"<span><b>{label}:</b> {_fmt(rec.reward)}{f' ({comps})' if comps else ''}</span>")
    for label, value in (("dataset", rec.dataset), ("method", rec.method), ("protocol", rec.protocol)):
        if value:
            meta.append(f"<span><b>{label}:</b> {_e(value)}</span>")
    if rec.row_metrics:
        ms = ", ".join(f"{_e(k)} {_e(_fmt(_opt_float(v)) if _opt_float(v) is not None else v)}"
                       for k, v in rec.row_metrics.items())  # fmt: skip
        meta.append(f"<span><b>row metrics:</b> {ms}</span>")
    meta.append(f"<span><b>id:</b> {_e(rec.uid)} · {_e(rec.source)}</span>")
    body = "".join(_turn_html(i, t) for i, t in enumerate(rec.turns, 1)) if rec.turns else _trace_html(rec)
    extra = _json_block("metadata", rec.metadata) if rec.metadata else ""
    return (
        f'<article class="traj {cls}" {attrs}><header class="traj-head"><h2 class="question">{_e(rec.question)}</h2>'
        f'<div class="meta">{"".join(meta)}</div></header><ol class="turns">{body}</ol>{extra}</article>\n'
    )


def _groups_html(records: Sequence[ViewRecord]) -> str:
    """A per dataset/method table when the records come from more than one of them."""
    if not any(r.dataset or r.method for r in records):
        return ""
    groups: dict[str, list[ViewRecord]] = {}
    for r in records:
        groups.setdefault(f"{r.dataset or '-'} / {r.method or '-'}", []).append(r)
    if len(groups) < 2:
        return ""
    rows = []
    for name, rs in groups.items():
        s = summarize(rs)
        rows.append(
            f"<tr><td>{_e(name)}</td><td>{s['n']}</td><td>{_fmt(s['em'])}</td><td>{_fmt(s['f1'])}</td>"
            f"<td>{_fmt(s['searches'], digits=2)}</td><td>{_fmt(s['answered'], pct=True)}</td></tr>"
        )
    head = "<tr><th>dataset / method</th><th>n</th><th>EM</th><th>F1</th><th>searches</th><th>answered</th></tr>"
    return f'<table class="groups">{head}{"".join(rows)}</table>'


def render_html(
    records: Sequence[ViewRecord],
    title: str = "SearchRL trajectories",
    *,
    total: int | None = None,
    n_bad: int = 0,
    all_records: Sequence[ViewRecord] | None = None,
    which: str = "first",
) -> str:
    """The viewer page for ``records``.

    ``total`` is how many records there were before a limit (the page says how many are not shown), ``n_bad`` how
    many rows were skipped as malformed, and ``all_records`` (default: ``records``) what the summary is computed on.
    """
    summary_over = list(all_records) if all_records is not None else list(records)
    s = summarize(summary_over)
    total = len(summary_over) if total is None else total
    stats = [
        ("trajectories", str(s["n"]), "n"),
        ("EM", _fmt(s["em"]), "em"),
        ("F1", _fmt(s["f1"]), "f1"),
        ("answered", _fmt(s["answered"], pct=True), "answered"),
        ("mean searches", _fmt(s["searches"], digits=2), "searches"),
        ("mean turns", _fmt(s["turns"], digits=2), "turns"),
        ("with invalid turns", _fmt(s["invalid"], pct=True), "invalid"),
    ]
    if s["reward"] is not None:
        training = any(r.kind == "rollout" for r in summary_over)  # else evaluation rows: their score
        stats.append(("mean reward" if training else "mean score", _fmt(s["reward"]), "reward"))
    stat_html = "".join(
        f'<span class="stat" data-stat="{k}">{_e(label)}: <b>{_e(v)}</b></span>' for label, v, k in stats
    )
    if s["n_scored"] < s["n"]:
        stat_html += f'<span class="stat">({s["n"] - s["n_scored"]} without golds, not scored)</span>'
    notices = []
    if total > len(records):
        notices.append(
            f"Showing the {which} {len(records)} of {total} records: {total - len(records)} not shown "
            "(raise --limit, or --limit 0 for all). The summary covers all of them."
        )
    if n_bad:
        notices.append(f"{n_bad} malformed row{'s' if n_bad != 1 else ''} skipped (--skip-bad).")
    notice_html = "".join(f'<div class="notice">{_e(n)}</div>' for n in notices)
    articles = "".join(_record_html(i, r) for i, r in enumerate(records))
    controls = (
        '<div class="controls"><input type="search" id="filter" placeholder="filter: any text in a trajectory">'
        '<label><input type="checkbox" id="only-correct"> only correct</label>'
        '<label><input type="checkbox" id="only-wrong"> only wrong</label>'
        '<label><input type="checkbox" id="only-invalid"> only with invalid turns</label>'
        '<label>sort <select id="sort"><option value="order:asc">file order</option>'
        '<option value="step:asc">step ↑</option><option value="step:desc">step ↓</option>'
        '<option value="reward:desc">reward / score ↓</option><option value="reward:asc">reward / score ↑</option>'
        '<option value="f1:desc">F1 ↓</option><option value="f1:asc">F1 ↑</option>'
        '<option value="searches:desc">searches ↓</option></select></label>'
        '<button type="button" id="expand">expand observations</button>'
        '<button type="button" id="collapse">collapse observations</button>'
        '<span id="visible"></span></div>'
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head>\n<body>\n"
        f'<header class="page"><h1>{_e(title)}</h1><div class="summary" id="summary">{stat_html}</div>'
        f"{_groups_html(summary_over)}{notice_html}</header>\n{controls}\n"
        f'<main id="records">\n{articles}</main>\n<script>{_JS}</script>\n</body></html>\n'
    )


def write_viewer(
    paths: str | Path | Sequence[str | Path],
    out: str | Path | None = None,
    *,
    limit: int = DEFAULT_LIMIT,
    skip_bad: bool = False,
    title: str | None = None,
    errors: list[str] | None = None,
    last: bool = False,
) -> Path:
    """Load every file of ``paths`` and write the viewer page; returns its path.

    ``out`` defaults to ``<first path stem>.html`` beside the first file. At most ``limit`` records are rendered
    (the first ones in file order, or the last ones with ``last``, e.g. a run's latest steps; ``limit <= 0`` renders
    all); the summary covers every record. With ``skip_bad``,
    malformed rows are skipped, counted on the page and their messages appended to ``errors`` (when given).
    """
    paths = [Path(paths)] if isinstance(paths, (str, Path)) else [Path(p) for p in paths]
    if not paths:
        raise ValueError("no trajectory files given")
    out = Path(out) if out is not None else paths[0].with_name(f"{paths[0].stem}.html")
    if any(out.resolve() == p.resolve() for p in paths):
        raise ValueError(f"output {out} is one of the input files; pass --out FILE.html")
    bad: list[str] = []
    records: list[ViewRecord] = []
    for p in paths:  # sources relative to the page, so a page copied with its run directory has no absolute paths
        shown_as = os.path.relpath(p.resolve(), out.resolve().parent)
        for rec in load_records(p, skip_bad=skip_bad, errors=bad):  # errors name the file as given
            rec.source = shown_as + rec.source[len(str(p)) :]
            records.append(rec)
    if errors is not None:
        errors.extend(bad)
    shown = (records[-limit:] if last else records[:limit]) if limit > 0 else records
    if title is None:
        title = "SearchRL trajectories: " + ", ".join(p.name for p in paths[:3]) + (" …" if len(paths) > 3 else "")
    html = render_html(shown, title=title, total=len(records), n_bad=len(bad), all_records=records,
                       which="last" if last else "first")  # fmt: skip
    return atomic_write_text(out, html)
