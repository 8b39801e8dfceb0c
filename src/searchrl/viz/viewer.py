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

from searchrl.eval.diagnostics import LABELS as DIAGNOSTIC_LABELS
from searchrl.utils import atomic_write_text, console
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
from searchrl.viz.viewer_assets import _CSS, _JS

# ------------------------------------------------------------------------------------------------ rendering


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
    if t.hint:
        parts.append(_observation(t.hint, t.n_hint_tokens, label="hint before the final turn"))
    parts.append("</li>")
    return "".join(parts)


def _json_block(label: str, value: Any, limit: int = 6000) -> str:
    text = json.dumps(value, ensure_ascii=False, indent=1, default=str)
    if len(text) > limit:
        text = text[:limit] + f"\n… ({len(text) - limit} more characters)"
    return f'<details class="extra"><summary>{_e(label)}</summary><pre>{_e(text)}</pre></details>'


def _any_strs(x: Any) -> list[str]:
    """A trace's list of strings as text; anything else is shown as its JSON, never an error at render time."""
    try:
        return _str_list(x)
    except ValueError:
        return [json.dumps(x, ensure_ascii=False, default=str)[:200]]


def _trace_html(rec: ViewRecord) -> str:
    """A non-agent eval row: the model output, the retrieval trace and any context text."""
    parts = []
    tr = rec.trace
    queries = _any_strs(tr.get("queries")) if isinstance(tr.get("queries"), list) else []
    hits = tr.get("hit_ids") if isinstance(tr.get("hit_ids"), list) else []
    if queries:
        parts.append(
            f'<li class="turn action-retrieve"><div class="turn-label">retrieval</div>'
            f"{_queries(queries, [_any_strs(h) for h in hits])}</li>"
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
            f"{_queries([q] if q else [], [_any_strs(st.get('hit_ids'))])}</li>"
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
        comps = ", ".join(
            f"{_e(k)} {_e(_fmt(_opt_float(v)) if _opt_float(v) is not None else v)}"
            for k, v in rec.reward_components.items()
        )
        label = "reward" if rec.kind == "rollout" else "score"  # an evaluation row's reward is its score
        meta.append(f"<span><b>{label}:</b> {_fmt(rec.reward)}{f' ({comps})' if comps else ''}</span>")
    for label, value in (("dataset", rec.dataset), ("method", rec.method), ("protocol", rec.protocol)):
        if value:
            meta.append(f"<span><b>{label}:</b> {_e(value)}</span>")
    if rec.row_metrics:
        ms = ", ".join(
            f"{_e(k)} {_e(_fmt(_opt_float(v)) if _opt_float(v) is not None else v)}"
            for k, v in rec.row_metrics.items()
        )
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
    for name, share in s["diagnostics"].items():  # evaluation rows: why answers are wrong
        stats.append((DIAGNOSTIC_LABELS.get(name, name), _fmt(share, pct=True), f"diag-{name}"))
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
    if out.is_dir():  # --out runs/pages: the page goes inside, named after the first file
        out = out / f"{paths[0].stem}.html"
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
    if not records:
        console.print(f"[yellow]warning:[/yellow] no records in {', '.join(map(str, paths))}; the page is empty")
    shown = (records[-limit:] if last else records[:limit]) if limit > 0 else records
    if title is None:
        title = "SearchRL trajectories: " + ", ".join(p.name for p in paths[:3]) + (" …" if len(paths) > 3 else "")
    html = render_html(
        shown, title=title, total=len(records), n_bad=len(bad), all_records=records, which="last" if last else "first"
    )
    return atomic_write_text(out, html)
