"""A static HTML viewer for trajectories: one self-contained file (inline CSS and a little vanilla JS, no network).

Every writer emits one record format (:mod:`searchrl.rollout.record`): ``{"source", "score", "metrics",
"trajectory"}`` plus its own fields (training rollouts add ``step``; evaluation prediction rows,
``searchrl.eval.harness.item_row``, add question, golds, prediction, and their ``trajectory`` is a full trajectory
(agent), a retrieval trace (RAG baselines) or None (direct)). Files written by earlier releases hold bare
trajectories (``Trajectory.to_dict()``) or ``{"step", "reward", "trajectory"}`` rows; they are read as well.

Everything is rendered from the turns' text (no tokenizer needed); model output is untrusted and always escaped
(:mod:`searchrl.viz.render`). A row's verdict is the writer's own ``metrics.correct`` (its run's
:class:`searchrl.rewards.correctness.Correctness`) when present, else exact match; EM and F1 are the row's own
``metrics.em`` / ``metrics.f1`` (scored with its run's answer normalisation) when present, else recomputed from the
final answer and the golds, so the page agrees with the run's own summary. Observations are cut into documents by
the protocol that wrote them (the one a row names, else the one that finds the most documents).

>>> from searchrl.viz.viewer import write_viewer
>>> write_viewer(["runs/demo/before.jsonl"])  # doctest: +SKIP
PosixPath('runs/demo/before.html')
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from searchrl.eval.diagnostics import LABELS as DIAGNOSTIC_LABELS
from searchrl.utils import atomic_write_lines, console
from searchrl.viz.records import (  # noqa: F401  (ViewRecord, load_records, summarize: re-exported)
    DEFAULT_LIMIT,
    GroupKey,
    Tally,
    ViewRecord,
    ViewTurn,
    _opt_float,
    _str,
    _str_list,
    iter_records,
    load_records,
    parse_row,
    summarize,
)
from searchrl.viz.render import (
    blocks_in,
    esc,
    fmt,
    highlight,
    marked_blocks,
    observation_html,
    plural,
)
from searchrl.viz.select import RowFilter, Window
from searchrl.viz.viewer_assets import _CSS, _JS

# ------------------------------------------------------------------------------------------------ rendering

#: what one marked block of each kind is called (the legend; a record counts them in the plural)
_BLOCK_NAMES = {"internal": "internal step", "evidence": "evidence block"}


def _verdict(rec: ViewRecord) -> tuple[str, str]:
    """(css class of the article, badge html): the writer's verdict (else EM) and the row's EM and F1."""
    verdict = rec.verdict
    if verdict is None:
        return "unscored", '<span class="badge na">no golds</span>'
    scores = f"EM {fmt(rec.em)} · F1 {fmt(rec.f1)}"
    if verdict:
        return "correct", f'<span class="badge ok">correct</span> {scores}'
    return "wrong", f'<span class="badge bad">wrong</span> {scores}'


def _queries(queries: Sequence[str], hit_ids: Sequence[Sequence[str]]) -> str:
    if not queries:
        return ""
    items = []
    for k, q in enumerate(queries):
        hits = hit_ids[k] if k < len(hit_ids) else []
        hit_html = f' <span class="hits">→ {esc(", ".join(hits))}</span>' if hits else ""
        items.append(f'<span class="query">{esc(q)}</span>{hit_html}')
    return f'<div class="queries">query: {" ".join(items)}</div>'


def _turn_html(i: int, t: ViewTurn, protocol: str | None, blocks: dict[str, tuple[str, str]]) -> str:
    cls = f"turn action-{esc(t.action)}" + (" invalid" if t.action == "invalid" else "")
    label = [f"turn {i}", t.action]
    if t.finish_reason:
        label.append(f"finish: {t.finish_reason}")
    label.append(f"{t.n_gen_tokens} policy tokens")
    if t.timings:
        label.append(", ".join(f"{k} {float(v):.3g}" for k, v in t.timings.items()))
    parts = [f'<li class="{cls}"><div class="turn-label">{esc(" · ".join(label))}</div>']
    parts.append(f'<pre class="policy">{highlight(t.text, t.queries, blocks)}</pre>')
    if t.action == "invalid" or t.invalid_reason:
        parts.append(f'<div class="invalid-reason">⚠ invalid: {esc(t.invalid_reason or "(no reason given)")}</div>')
    parts.append(_queries(t.queries, t.hit_ids))
    if t.observation:
        parts.append(observation_html(t.observation, t.n_obs_tokens, protocol=protocol))
    if t.hint:
        parts.append(observation_html(t.hint, t.n_hint_tokens, "hint before the final turn", protocol))
    parts.append("</li>")
    return "".join(parts)


def _json_block(label: str, value: Any, limit: int = 6000) -> str:
    text = json.dumps(value, ensure_ascii=False, indent=1, default=str)
    if len(text) > limit:
        text = text[:limit] + f"\n… ({len(text) - limit} more characters)"
    return f'<details class="extra"><summary>{esc(label)}</summary><pre>{esc(text)}</pre></details>'


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
        parts.append(f'<li class="turn action-context">{observation_html(ctx, 0, f"context {k}", rec.protocol)}</li>')
    steps = tr.get("steps") if isinstance(tr.get("steps"), list) else []
    for k, st in enumerate(steps, 1):
        if not isinstance(st, dict):
            continue
        q = _str(st.get("query"))
        parts.append(
            f'<li class="turn action-step"><div class="turn-label">step {k}</div>'
            f'<pre class="policy">{esc(st.get("sentence"))}</pre>'
            f"{_queries([q] if q else [], [_any_strs(st.get('hit_ids'))])}</li>"
        )
    if rec.raw:
        parts.append(
            f'<li class="turn action-output"><div class="turn-label">model output</div>'
            f'<pre class="policy">{esc(rec.raw)}</pre></li>'
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
    attrs = " ".join(f'data-{k}="{esc(v)}"' for k, v in data.items())
    meta = [
        f"<span>{badge}</span>",
        f"<span><b>golds:</b> {esc(' | '.join(rec.golds)) if rec.golds else '(none)'}</span>",
        f"<span><b>answer:</b> {esc(rec.answer) if rec.answer is not None else '<i>(none)</i>'}</span>",
    ]
    if rec.stop_reason:
        meta.append(f"<span><b>stop:</b> {esc(rec.stop_reason)}</span>")
    queries = plural(c.get("queries", 0), "query", "queries")
    meta.append(
        f"<span><b>searches:</b> {c.get('searches', 0)} ({queries}) · <b>turns:</b> "
        f"{c.get('turns', 0)} · <b>tokens:</b> {c.get('policy_tokens', 0)} policy / "
        f"{c.get('inserted_tokens', 0)} inserted</span>"
    )
    blocks = marked_blocks(rec.protocol)
    for kind, (opening, _) in blocks.items():  # R1-Searcher++'s internal steps, R-Search's evidence
        if n := sum(t.text.count(opening) for t in rec.turns):
            meta.append(f"<span><b>{esc(_BLOCK_NAMES.get(kind, kind))}s:</b> {n}</span>")
    if rec.n_invalid:
        meta.append(f'<span class="badge inv">{rec.n_invalid} invalid</span>')
    if rec.step is not None:
        meta.append(f"<span><b>step:</b> {rec.step}</span>")
    if rec.reward is not None:
        comps = ", ".join(
            f"{esc(k)} {esc(fmt(_opt_float(v)) if _opt_float(v) is not None else v)}"
            for k, v in rec.reward_components.items()
        )
        label = "reward" if rec.kind == "rollout" else "score"  # an evaluation row's reward is its score
        meta.append(f"<span><b>{label}:</b> {fmt(rec.reward)}{f' ({comps})' if comps else ''}</span>")
    for label, value in (("dataset", rec.dataset), ("method", rec.method), ("protocol", rec.protocol)):
        if value:
            meta.append(f"<span><b>{label}:</b> {esc(value)}</span>")
    if rec.row_metrics:
        ms = ", ".join(
            f"{esc(k)} {esc(fmt(_opt_float(v)) if _opt_float(v) is not None else v)}"
            for k, v in rec.row_metrics.items()
        )
        meta.append(f"<span><b>row metrics:</b> {ms}</span>")
    meta.append(f"<span><b>id:</b> {esc(rec.uid)} · {esc(rec.source)}</span>")
    turns = (_turn_html(i, t, rec.protocol, blocks) for i, t in enumerate(rec.turns, 1))
    body = "".join(turns) if rec.turns else _trace_html(rec)
    extra = _json_block("metadata", rec.metadata) if rec.metadata else ""
    return (
        f'<article class="traj {cls}" {attrs}><header class="traj-head"><h2 class="question">{esc(rec.question)}</h2>'
        f'<div class="meta">{"".join(meta)}</div></header><ol class="turns">{body}</ol>{extra}</article>\n'
    )


def _group_table(tally: Tally, heading: str, name_of: Callable[[GroupKey], str]) -> str:
    """One summary row per distinct name of the tally's groups, in order of first appearance."""
    names: dict[str, list[GroupKey]] = {}
    for key in tally.groups:
        names.setdefault(name_of(key), []).append(key)
    total = tally.total()
    every = total.result()
    reward = "reward" if total.n_rollouts else "score"
    cols = [("n", "n", False), ("EM", "em", False), ("F1", "f1", False), ("correct", "correct", True)]
    cols += [(reward, "reward", False), ("searches", "searches", False), ("answered", "answered", True)]
    cols = [c for c in cols if every[c[1]] is not None]
    rows = []
    for name, keys in names.items():
        s = tally.total(keys).result()
        cells = "".join(f"<td>{s[k] if k == 'n' else fmt(s[k], pct=pct)}</td>" for _, k, pct in cols)
        rows.append(f"<tr><td>{esc(name)}</td>{cells}</tr>")
    head = f"<tr><th>{esc(heading)}</th>{''.join(f'<th>{esc(label)}</th>' for label, _, _ in cols)}</tr>"
    return f'<table class="groups">{head}{"".join(rows)}</table>'


def _method(key: GroupKey) -> str:
    return f"{key[2] or '-'} / {key[3] or '-'}"


def _input_keys(keys: Sequence[GroupKey]) -> tuple[str, Callable[[GroupKey], str] | None]:
    """(heading, name of a group) telling apart the input files, and the row sources within a file; ("", None)
    when all records come from one file and one source."""
    files, pairs = {k[0] for k in keys}, {k[:2] for k in keys}
    by_file, by_source = len(files) > 1, len(pairs) > len(files)
    if by_file and by_source:
        return "file · source", lambda k: f"{k[0]} · {k[1]}"
    if by_file:
        return "file", lambda k: k[0]
    return ("source", lambda k: k[1]) if by_source else ("", None)


def _groups_html(tally: Tally) -> str:
    """Summary tables when the records come from more than one dataset / method, and from more than one input file
    or row source (e.g. a demo's before and after); the second is left out when it groups the records alike."""
    keys = list(tally.groups)
    methods = {_method(k) for k in keys}
    heading, input_of = _input_keys(keys)
    tables = []
    if len(methods) > 1:
        tables.append(_group_table(tally, "dataset / method", _method))
    if input_of is not None:
        inputs = {input_of(k) for k in keys}
        alike = len({(_method(k), input_of(k)) for k in keys}) == len(methods) == len(inputs)
        if not (tables and alike):
            tables.append(_group_table(tally, heading, input_of))
    return "".join(tables)


#: what the styles of a card mean; a marked block's entry only when the page has one
_LEGEND = (
    '<div class="legend"><span class="policy-key">policy text (sampled by the model: in the loss)</span>'
    '<span class="inserted-key">inserted text (documents, feedback, hints: masked out of the loss)</span>'
    '<mark class="q">query</mark>'
)


def _blocks_shown(records: Sequence[ViewRecord]) -> set[str]:
    """The kinds of marked block that the records' turns show (as :func:`_turn_html` marks them)."""
    kinds: set[str] = set()
    for rec in records:
        if rec.turns and (blocks := marked_blocks(rec.protocol)):
            kinds.update(*(blocks_in(t.text, blocks) for t in rec.turns))
    return kinds


def _legend(kinds: set[str]) -> str:
    """The key to the page's colours, with the kinds of marked block its records show (:func:`_blocks_shown`)."""
    return (
        _LEGEND
        + "".join(f'<span class="blk {k}">{_BLOCK_NAMES[k]}</span>' for k in _BLOCK_NAMES if k in kinds)
        + "</div>"
    )


def render_html(records: Sequence[ViewRecord], title: str = "SearchRL trajectories", **options: Any) -> str:
    """The viewer page for ``records``: :func:`page_parts` (its keyword ``options``) as one string."""
    return "".join(page_parts(records, title, **options))


def page_parts(
    records: Sequence[ViewRecord],
    title: str = "SearchRL trajectories",
    *,
    total: int | None = None,
    n_bad: int = 0,
    all_records: Sequence[ViewRecord] | None = None,
    which: str = "first",
    tally: Tally | None = None,
    notes: Sequence[str] = (),
) -> Iterator[str]:
    """The viewer page for ``records``, in pieces to write one after another (the header, then each record's
    article as it is rendered, then the end), so a page of tens of thousands of records is never one string.

    ``total`` is how many records there were before a limit (the page says how many are not shown and how to see
    them), ``n_bad`` how many rows were skipped as malformed, ``all_records`` (default: ``records``) what the summary
    is computed on, or ``tally`` that summary already added up (:func:`write_viewer`'s, over files it did not keep).
    ``which`` says which records are shown ("first", "last", or a phrase: "a random sample of 500"); ``notes`` are
    shown first (e.g. the filter applied).
    """
    if tally is None:
        tally = Tally(all_records if all_records is not None else records)
    overall = tally.total()
    s = overall.result()
    total = overall.n if total is None else total
    stats = [
        ("trajectories", str(s["n"]), "n"),
        ("EM", fmt(s["em"]), "em"),
        ("F1", fmt(s["f1"]), "f1"),
        *([("correct", fmt(s["correct"], pct=True), "correct")] if s["correct"] is not None else []),
        ("answered", fmt(s["answered"], pct=True), "answered"),
        ("mean searches", fmt(s["searches"], digits=2), "searches"),
        ("mean turns", fmt(s["turns"], digits=2), "turns"),
        ("with invalid turns", fmt(s["invalid"], pct=True), "invalid"),
    ]
    for name, share in s["diagnostics"].items():  # evaluation rows: why answers are wrong
        stats.append((DIAGNOSTIC_LABELS.get(name, name), fmt(share, pct=True), f"diag-{name}"))
    if s["reward"] is not None:
        training = overall.n_rollouts > 0  # else evaluation rows: their score
        stats.append(("mean reward" if training else "mean score", fmt(s["reward"]), "reward"))
    stat_html = "".join(
        f'<span class="stat" data-stat="{k}">{esc(label)}: <b>{esc(v)}</b></span>' for label, v, k in stats
    )
    if s["n_scored"] < s["n"]:
        stat_html += f'<span class="stat">({s["n"] - s["n_scored"]} without golds, not scored)</span>'
    notices = list(notes)
    if total > len(records):
        shown = f"the {which} {len(records)}" if which in ("first", "last") else which
        notices.append(
            f"Showing {shown} of {total} records: {total - len(records)} not shown. To see others: --offset N (the"
            " next page), --last, --sample (a random sample), --dataset / --method / --only / --step (a subset), or"
            " raise --limit (0: all, too big for a browser past some thousands). The summary covers all of them."
        )
    if n_bad:
        notices.append(f"{n_bad} malformed row{'s' if n_bad != 1 else ''} skipped (--skip-bad).")
    notice_html = "".join(f'<div class="notice">{esc(n)}</div>' for n in notices)
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
    yield (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{_CSS}</style></head>\n<body>\n"
        f'<header class="page"><h1>{esc(title)}</h1><div class="summary" id="summary">{stat_html}</div>'
        f"{_groups_html(tally)}{notice_html}{_legend(_blocks_shown(records))}</header>\n{controls}\n"
        '<main id="records">\n'
    )
    for i, r in enumerate(records):
        yield _record_html(i, r)
    yield f"</main>\n<script>{_JS}</script>\n</body></html>\n"


#: a page larger than this is named in a warning: browsers slow to a crawl on pages of hundreds of megabytes
LARGE_PAGE_BYTES = 100 * 2**20


def write_viewer(
    paths: str | Path | Sequence[str | Path],
    out: str | Path | None = None,
    *,
    limit: int = DEFAULT_LIMIT,
    skip_bad: bool = False,
    title: str | None = None,
    errors: list[str] | None = None,
    last: bool = False,
    offset: int = 0,
    sample: bool = False,
    where: RowFilter | None = None,
) -> Path:
    """Read every file of ``paths`` and write the viewer page; returns its path.

    ``out`` defaults to ``<first path stem>.html`` beside the first file. The files are read one row at a time and
    only the rows the page shows are kept, so memory follows the page, not the files. Rows that ``where`` (a
    :class:`RowFilter`: dataset, method, correct / wrong / invalid, steps) leaves out are neither shown nor
    summarised. Of the rest, at most ``limit`` are rendered: the first ones in file order after skipping ``offset``
    (a page further on), with ``last`` the last ones (a run's latest steps; ``offset`` then skips from the end), with
    ``sample`` a random sample (seeded) over all files; ``limit <= 0`` renders all. The summary covers every row
    that passes the filter; the page says what is left out and how to see it. With ``skip_bad``, malformed rows are
    skipped, counted on the page and their messages appended to ``errors`` (when given).
    """
    paths = [Path(paths)] if isinstance(paths, (str, Path)) else [Path(p) for p in paths]
    if not paths:
        raise ValueError("no trajectory files given")
    page = f"{Path(paths[0].name.removesuffix('.gz')).stem}.html"  # rollouts.jsonl(.gz) -> rollouts.html
    out = Path(out) if out is not None else paths[0].with_name(page)
    if out.is_dir():  # --out runs/pages: the page goes inside, named after the first file
        out = out / page
    if any(out.resolve() == p.resolve() for p in paths):
        raise ValueError(f"output {out} is one of the input files; pass --out FILE.html")
    where = where or RowFilter()
    window = Window(limit, offset=offset, last=last, sample=sample)
    bad: list[str] = []
    tally = Tally()
    n_read = 0
    seen: dict[str, set[str]] = {"dataset": set(), "method": set()}  # named when nothing matches (the first 20)
    steps: list[int] = []  # the first and last step read, likewise
    for p in paths:  # sources relative to the page, so a page copied with its run directory has no absolute paths
        try:
            shown_as = os.path.relpath(p.resolve(), out.resolve().parent)
        except ValueError:  # Windows: on another drive than the page, so there is no relative path
            shown_as = str(p.resolve())
        for rec in iter_records(p, skip_bad=skip_bad, errors=bad):  # errors name the file as given
            n_read += 1
            for kind, value in (("dataset", rec.dataset), ("method", rec.method)):
                if len(seen[kind]) < 20:
                    seen[kind].add(value or "-")
            if rec.step is not None:
                steps[:] = [min(steps[0], rec.step), max(steps[1], rec.step)] if steps else [rec.step, rec.step]
            if not where.matches(rec):
                continue
            rec.source = shown_as + rec.source[len(str(p)) :]
            tally.add(rec)
            window.offer(rec)
    if errors is not None:
        errors.extend(bad)
    notes = []
    if where.active:
        notes.append(f"Filter: {where.describe()}: {window.n} of {n_read} records match; the summary covers those.")
    if not n_read:
        console.print(f"[yellow]warning:[/yellow] no records in {', '.join(map(str, paths))}; the page is empty")
    elif not window.n:
        found = [f"{k}s: {', '.join(sorted(v))}" for k, v in seen.items() if getattr(where, f"{k}s")]
        found += [f"steps {steps[0]}-{steps[1]}" if steps else "no steps"] if where.steps else []
        console.print(
            f"[yellow]warning:[/yellow] no record matches {where.describe()} (read: {'; '.join(found) or n_read});"
            " the page is empty"
        )
    shown = window.records()
    if title is None:
        title = "SearchRL trajectories: " + ", ".join(p.name for p in paths[:3]) + (" …" if len(paths) > 3 else "")
    which = window.which(len(shown))
    atomic_write_lines(
        out, page_parts(shown, title, total=window.n, n_bad=len(bad), tally=tally, which=which, notes=notes)
    )
    if (size := out.stat().st_size) > LARGE_PAGE_BYTES:
        console.print(
            f"[yellow]warning:[/yellow] the page holds {len(shown)} records ({size / 2**20:.0f} MB of text): "
            "too big for a browser to open smoothly; show fewer with --limit, --sample or --dataset / --only / --step"
        )
    return out
