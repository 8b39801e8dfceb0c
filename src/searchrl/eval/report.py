"""Summaries of an evaluation: aggregation, and the same table as markdown, CSV, JSON, a rich table and a PNG.

A *summary row* is one (dataset, method) pair: ``n``, the mean of every score (``em``, ``f1``, ``cover_em``,
``cover_em_tokens``, and ``judge`` when a judge ran), and the efficiency figures per question (``searches``:
search calls, ``queries``: the queries they held, ``gen_tokens``, ``latency_s``). When there is more than one
dataset, each method that ran on all of them also gets a row with ``dataset == "average"``: the unweighted mean
over the datasets (the papers' "Avg." column); its counts, ``n`` and ``judge_unparsed``, are the datasets' sums.
:mod:`searchrl.eval.stats` adds each score's 95% interval, ``<score>_ci95``, after it.

Scores are fractions in JSON and CSV, and percentages (one decimal) in the markdown, console and PNG tables. The
markdown table is wide, paper-style: one row per method, one column per dataset x score, then the average columns,
then the efficiency columns (averaged over datasets). Off a terminal the console gets the same table as plain
fixed-width text.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from statistics import fmean
from typing import Any

import numpy as np
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table

from searchrl.utils import atomic_write_text

AVERAGE = "average"
LABELS = {
    "em": "EM",
    "f1": "F1",
    "token_f1": "F1 (plain)",
    "cover_em": "cover-EM",
    "cover_em_committed": "cover-EM (committed)",
    "cover_em_tokens": "cover-EM (tokens)",
    "judge": "judge",
}
EFFICIENCY = (
    ("searches", "searches/q", 2),
    ("queries", "queries/q", 2),
    ("gen_tokens", "gen tokens/q", 1),
    ("latency_s", "latency s/q", 3),
    ("well_formed", "well-formed", 2),
)


def _mean(values: Sequence[float | None]) -> float | None:
    """Mean of the values that are not None (and not NaN); None when there are none."""
    kept = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return fmean(kept) if kept else None


def aggregate(items: Sequence[dict[str, Any]], metrics: Sequence[str]) -> list[dict[str, Any]]:
    """Summary rows from per-item rows (each with ``dataset``, ``method``, ``metrics``, ``searches``, ``queries``,
    ``gen_tokens``, ``latency_s``; a missing figure is left out of its mean), in first-seen order, plus
    ``average`` rows when there are several datasets.

    A judge score of None (an unreadable judge reply) is left out of the judge mean and counted in
    ``judge_unparsed``.
    """
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for it in items:
        groups.setdefault((it["dataset"], it["method"]), []).append(it)
    rows: list[dict[str, Any]] = []
    for (dataset, method), group in groups.items():
        row: dict[str, Any] = {"dataset": dataset, "method": method, "n": len(group)}
        for m in metrics:
            row[m] = _mean([it["metrics"].get(m) for it in group])
        if "judge" in metrics:
            row["judge_unparsed"] = sum(1 for it in group if it["metrics"].get("judge") is None)
        for key, _, _ in EFFICIENCY:
            row[key] = _mean([it.get(key) for it in group])
        if row["well_formed"] is None:  # only agent methods have a format to check
            del row["well_formed"]
        rows.append(row)
    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    if len(datasets) > 1:
        for method in dict.fromkeys(r["method"] for r in rows):
            mine = [r for r in rows if r["method"] == method]
            if len(mine) < len(datasets):  # an average over fewer datasets would not compare with the others
                continue
            avg: dict[str, Any] = {"dataset": AVERAGE, "method": method, "n": sum(r["n"] for r in mine)}
            for key in [*metrics, *(k for k, _, _ in EFFICIENCY)]:
                if any(key in r for r in mine):
                    avg[key] = _mean([r.get(key) for r in mine])
            if "judge" in metrics:  # a count: summed over the datasets, not averaged
                avg["judge_unparsed"] = sum(r.get("judge_unparsed", 0) for r in mine)
            rows.append(avg)
    return rows


def breakdown(items: Sequence[dict[str, Any]], metrics: Sequence[str], key: str) -> list[dict[str, Any]]:
    """Summary rows per (dataset, method, ``item[key]``) for the items that carry a ``key`` (a question kind, a
    style); each row holds its group under ``key``. No average rows."""
    keyed = [{**it, "dataset": f"{it['dataset']}\x00{it[key]}"} for it in items if it.get(key)]
    rows = [r for r in aggregate(keyed, metrics) if r["dataset"] != AVERAGE]
    for r in rows:
        r["dataset"], r[key] = r["dataset"].split("\x00", 1)
    return rows


#: the row of :func:`by_style` that pools the styles a dataset has a single question of.
POOLED_STYLES = "(styles of one question each)"


def by_style(items: Sequence[dict[str, Any]], metrics: Sequence[str]) -> list[dict[str, Any]]:
    """Summary rows per (dataset, method, question ``style``); the styles of a single question in their dataset are
    pooled into one row, :data:`POOLED_STYLES` (questions whose wording repeats no other's: one row, not one each)."""
    n = Counter((it["dataset"], it["method"], it["style"]) for it in items if it.get("style"))
    pooled = [
        {**it, "style": it["style"] if n[(it["dataset"], it["method"], it["style"])] > 1 else POOLED_STYLES}
        for it in items
        if it.get("style")
    ]
    return breakdown(pooled, metrics, "style")


def group_table(rows: Sequence[dict[str, Any]], metrics: Sequence[str], key: str, title: str) -> str:
    """A markdown section of :func:`breakdown` rows: one line per (dataset, method, group), most questions first."""
    ordered = sorted(rows, key=lambda r: (r["dataset"], r["method"], -r["n"], str(r[key])))
    lines = [
        f"## {title}",
        "",
        "Scores in %.",
        "",
        f"| dataset | method | {key} | n | " + " | ".join(LABELS.get(m, m) for m in metrics) + " |",
        "|---|---|---|---:|" + "---:|" * len(metrics),
    ]
    lines += [
        f"| {md_cell(r['dataset'])} | {md_cell(r['method'])} | {md_cell(str(r[key]))} | {r['n']} | "
        + " | ".join(_pct(r.get(m)) for m in metrics)
        + " |"
        for r in ordered
    ]
    return "\n".join(lines)


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}"


def _num(v: float | None, digits: int) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def wide_table(rows: Sequence[dict[str, Any]], metrics: Sequence[str]) -> tuple[list[str], list[list[str]]]:
    """(header, body) of the paper-style table: method | dataset x score ... | average x score | efficiency."""
    datasets = [d for d in dict.fromkeys(r["dataset"] for r in rows) if d != AVERAGE]
    columns = [*datasets, AVERAGE] if any(r["dataset"] == AVERAGE for r in rows) else datasets
    eff_from = AVERAGE if AVERAGE in columns else (datasets[0] if datasets else AVERAGE)
    header = ["method"] + [f"{'Average' if d == AVERAGE else d} {LABELS.get(m, m)}" for d in columns for m in metrics]
    efficiency = [e for e in EFFICIENCY if e[0] != "well_formed" or any("well_formed" in r for r in rows)]
    header += [label for _, label, _ in efficiency]
    body = []
    by_key = {(r["dataset"], r["method"]): r for r in rows}
    for method in dict.fromkeys(r["method"] for r in rows):
        line = [method]
        for d in columns:
            r = by_key.get((d, method), {})
            line += [_pct(r.get(m)) for m in metrics]
        eff = by_key.get((eff_from, method), {})
        line += [_num(eff.get(key), digits) for key, _, digits in efficiency]
        body.append(line)
    return header, body


def md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(
    rows: Sequence[dict[str, Any]],
    metrics: Sequence[str],
    title: str = "Evaluation summary",
    notes: Sequence[str] = (),
    after: Sequence[str] = (),
    sizes: Mapping[str, int] | None = None,
) -> str:
    """A heading, one line on what the numbers are (plus ``notes``: how they were scored and timed), the wide
    table (every row has the header's column count), then the ``after`` sections (e.g. why answers are wrong).
    ``sizes``: questions per dataset, empty ones included (default: read off the rows)."""
    header, body = wide_table(rows, metrics)
    n_by_dataset: dict[str, int] = dict(sizes or {})
    for r in rows:
        if r["dataset"] != AVERAGE:
            n_by_dataset.setdefault(r["dataset"], r["n"])
    counts = ", ".join(f"{d}: {n}" for d, n in n_by_dataset.items()) or "none"
    averaged = {r["method"] for r in rows if r["dataset"] == AVERAGE}
    if len({r["dataset"] for r in rows} - {AVERAGE}) > 1 and averaged != {r["method"] for r in rows}:
        notes = [*notes, "Average and efficiency columns: over every dataset; `-` for a method not run on all."]
    unread = [  # per dataset: the average row's sum would count them twice
        f"{r['method']} on {r['dataset']}: {r['judge_unparsed']}"
        for r in rows
        if r.get("judge_unparsed") and r["dataset"] != AVERAGE
    ]
    if unread:  # the judge's accuracy is over the replies it could read: say over how many fewer
        notes = [*notes, f"Judge replies that could not be read, left out of its accuracy: {', '.join(unread)}."]
    lines = [
        f"# {title}",
        "",
        f"Scores in %; efficiency figures per question (averaged over datasets). Questions per dataset: {counts}.",
        *(line for note in notes for line in ("", note)),
        "",
        "| " + " | ".join(md_cell(h) for h in header) + " |",
        "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|",
    ]
    lines += ["| " + " | ".join(md_cell(c) for c in line) + " |" for line in body]
    lines += [line for section in after for line in ("", section)]
    return "\n".join(lines) + "\n"


def _flat(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row with each interval ``[lo, hi]`` as two columns, ``<key>_lo`` and ``<key>_hi``."""
    out: dict[str, Any] = {}
    for k, v in row.items():
        if k.endswith("_ci95"):
            out[f"{k}_lo"], out[f"{k}_hi"] = v if v is not None else (None, None)
        else:
            out[k] = v
    return out


def render_csv(rows: Sequence[dict[str, Any]]) -> str:
    """Long format: one line per (dataset, method), raw fractions; an interval as its ``_lo`` and ``_hi`` columns."""
    rows = [_flat(r) for r in rows]
    keys = list(dict.fromkeys(k for r in rows for k in r))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=keys, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: "" if r.get(k) is None else r.get(k) for k in keys})
    return buf.getvalue()


def plain_table(header: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    """A fixed-width text table (columns padded to their widest cell): readable in a log file or a pipe. Widths are
    terminal cells, so a dataset named in Chinese or Japanese (two cells a character) keeps its columns aligned."""
    widths = [max(cell_len(str(c)) for c in col) for col in zip(header, *body, strict=True)]

    def pad(c: object, w: int, left: bool) -> str:
        fill = " " * (w - cell_len(str(c)))
        return f"{c}{fill}" if left else f"{fill}{c}"

    lines = [
        "  ".join(pad(c, w, i == 0) for i, (c, w) in enumerate(zip(line, widths, strict=True)))
        for line in (header, *body)
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def print_summary(rows: Sequence[dict[str, Any]], metrics: Sequence[str], title: str = "evaluation") -> None:
    """The markdown table's content on stdout (the command's result; logs stay on stderr): a rich table on a
    terminal, else plain fixed-width text (a rich table squeezed to 80 columns would wrap every header in a log)."""
    header, body = wide_table(rows, metrics)
    out = Console(markup=False, emoji=False)  # dataset and method names as written
    if not out.is_terminal:
        out.print(f"{title} (scores in %)\n{plain_table(header, body)}", markup=False, highlight=False, soft_wrap=True)
        return
    table = Table(title=f"{title} (scores in %)")
    for i, h in enumerate(header):
        table.add_column(
            h,
            justify="left" if i == 0 else "right",
            no_wrap=i == 0,
            min_width=max(cell_len(b[0]) for b in body) if i == 0 and body else None,
        )
    for line in body:
        table.add_row(*line)
    out.print(table)


def print_section(text: str) -> None:
    """A markdown section after the summary table on stdout (a result, as the table is), a blank line before it."""
    Console().print(f"\n{text}", markup=False, highlight=False, soft_wrap=True)


def plot_summary(rows: Sequence[dict[str, Any]], metrics: Sequence[str], path: str | Path) -> Path:
    """Grouped bar chart: one panel per score, datasets (and the average) on the x axis, one bar per method."""
    import matplotlib

    matplotlib.use("Agg")  # no display; safe in CI and on servers
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    by_key = {(r["dataset"], r["method"]): r for r in rows}
    panels = list(metrics) or ["em"]
    panel_width = min(8.0, max(4.0, 1.2 + 0.5 * len(datasets) * len(methods)))
    ncols = max(1, min(len(panels), int(16 // panel_width)))  # at most ~16 inches wide: more panels wrap
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(panel_width * ncols, 4.0 * nrows), squeeze=False)
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    x = np.arange(len(datasets))
    width = 0.8 / max(len(methods), 1)
    for ax, metric in zip(axes.flat, panels, strict=False):
        for j, method in enumerate(methods):
            values = [by_key.get((d, method), {}).get(metric) for d in datasets]
            heights = [0.0 if v is None else 100 * v for v in values]
            bars = ax.bar(x - 0.4 + width * (j + 0.5), heights, width, label=method)
            ax.bar_label(bars, labels=[_pct(v) for v in values], fontsize=7, padding=1)
        ax.set_title(LABELS.get(metric, metric))
        ax.set_xticks(x, datasets, rotation=20 if len(datasets) > 3 else 0)
        ax.set_ylim(0, max(5.0, ax.get_ylim()[1] * 1.1))
        ax.set_ylabel("%")
    if methods:
        axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def write_reports(
    rows: Sequence[dict[str, Any]],
    metrics: Sequence[str],
    out_dir: str | Path,
    extra: dict[str, Any] | None = None,
    title: str = "Evaluation summary",
    notes: Sequence[str] = (),
    after: Sequence[str] = (),
    sizes: Mapping[str, int] | None = None,
) -> dict[str, Path]:
    """Write ``summary.md``, ``summary.csv``, ``summary.json`` (rows plus ``extra``) and ``summary.png``."""
    out = Path(out_dir)
    payload = {
        "metrics": list(metrics),
        **(extra or {}),
        "rows": [{k: _jsonable(v) for k, v in r.items()} for r in rows],
    }
    return {
        "md": atomic_write_text(out / "summary.md", render_markdown(rows, metrics, title, notes, after, sizes)),
        "csv": atomic_write_text(out / "summary.csv", render_csv(rows)),
        "json": atomic_write_text(out / "summary.json", json.dumps(payload, indent=2, ensure_ascii=False) + "\n"),
        "png": plot_summary(rows, metrics, out / "summary.png"),
    }
