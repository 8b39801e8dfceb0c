"""Training curves from a run's metrics.jsonl: reward, response length and searches over steps (as in the papers);
several runs overlay in one figure, one colour per run.

A value logged as NaN or inf (null in metrics.jsonl) breaks its line and is marked with a red x at the panel's edge
(top; bottom for -inf), so a run that blew up never looks smooth; values that are not numbers and rows without an
integer step are left out and named in the warning.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path

from rich.markup import escape

from searchrl.utils import console, open_lines

#: (metric key, panel title, y-axis label)
PANELS = [
    ("reward/total", "reward", "mean reward"),
    ("rollout/em", "EM (rollouts)", "exact match"),
    ("eval/em", "EM (held-out, greedy)", "exact match"),
    ("eval/f1", "F1 (held-out, greedy)", "token F1"),
    ("rollout/well_formed", "well-formed rate", "fraction well-formed"),
    ("rollout/searches", "searches per trajectory", "searches"),
    ("rollout/response_len", "response length", "tokens"),
    ("kl/mean", "KL to reference", "KL (nats/token)"),
    ("time/step_s", "seconds per step", "seconds"),
    ("loss", "SFT loss", "loss"),
    ("val_loss", "SFT validation loss", "loss"),
]
#: metrics that are rates in [0, 1], by the last part of their key: their panels share the range 0..1 (with a margin)
#: when every value lies in it, so runs and panels compare at a glance
RATES = ("em", "f1", "correct", "cover_em", "well_formed", "answered", "accuracy", "acc", "invalid_rate")


def load_metrics(run_dir: str | Path) -> list[dict]:
    """The rows of ``run_dir/metrics.jsonl``, read one line at a time (a long run's file never sits in memory whole);
    a last line without its newline that is not JSON (a run still writing it) is left out."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: point to a run directory written by `searchrl train`")
    rows = []
    for i, line in open_lines(path):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            if not line.endswith("\n"):  # a run still writing its last line: plot what is complete
                break
            raise ValueError(f"{path}:{i}: not valid JSON ({err.msg}); fix or remove that line") from None
        if not isinstance(row, dict):
            raise ValueError(f"{path}:{i}: not a JSON object of metrics; fix or remove that line")
        rows.append(row)
    return rows


def moving_average(values: list[float], window: int) -> list[float]:
    """Trailing mean over the last ``window`` values (fewer at the start) that are finite; a non-finite value stays
    NaN (a break in the line). ``window <= 1`` returns the values.

    >>> moving_average([1.0, 3.0, 5.0, 7.0], 2)
    [1.0, 2.0, 4.0, 6.0]
    >>> moving_average([1.0, float("nan"), 5.0], 2)
    [1.0, nan, 5.0]
    """
    if window <= 1:
        return list(values)
    out = []
    for i, v in enumerate(values):
        recent = [x for x in values[max(0, i - window + 1) : i + 1] if math.isfinite(x)]
        out.append(sum(recent) / len(recent) if math.isfinite(v) else math.nan)
    return out


def _step(row: dict) -> int | None:
    s = row.get("step")
    ok = isinstance(s, int | float) and not isinstance(s, bool) and math.isfinite(s) and s == int(s)
    return int(s) if ok else None


def _series(rows: list[dict]) -> tuple[dict[str, list[tuple[int, float | None]]], dict[str, list[str]]]:
    """Per panel key, ``(step, value)`` in step order: the last value of a step that a resumed run logged again
    (``metrics.jsonl`` is appended to), NaN / inf as logged (null is NaN), None for a value that is not a number.
    And the problems, by kind: what was left out or cannot be drawn, one short description each."""
    by_key: dict[str, dict[int, float | None]] = {k: {} for k, _, _ in PANELS}
    problems: dict[str, list[str]] = {"not finite": [], "not a number": [], "no step": []}
    for r in rows:
        present = [k for k in by_key if k in r]
        step = _step(r)
        if present and step is None:
            problems["no step"].append(f"step {r['step']!r}" if "step" in r else "no step")
            continue
        for k in present:
            v = r[k]
            if v is None or (isinstance(v, float) and not math.isfinite(v)):
                problems["not finite"].append(f"{k} at step {step}")
                by_key[k][step] = math.nan if v is None else v
            elif isinstance(v, bool) or not isinstance(v, int | float):
                problems["not a number"].append(f"{k} = {v!r} at step {step}")
                by_key[k][step] = None
            else:
                by_key[k][step] = float(v)
    return {k: sorted(d.items()) for k, d in by_key.items()}, problems


_PROBLEMS = {  # kind -> (one, several, what happens to them)
    "not finite": ("value not finite (NaN, inf)", "values not finite (NaN, inf)", "the line breaks there, marked x"),
    "not a number": ("value not a number", "values not numbers", "not drawn"),
    "no step": ("row without an integer step", "rows without an integer step", "not drawn"),
}


def _warn(where: str, problems: dict[str, list[str]]) -> None:
    for kind, found in problems.items():
        if found:
            one, several, what = _PROBLEMS[kind]
            examples = "; ".join(found[:2]) + ("; ..." if len(found) > 2 else "")
            noun = one if len(found) == 1 else several
            console.log(f"[yellow]warning:[/yellow] {where}: {len(found)} {noun}: {what} ({escape(examples)})")


def _finite(values: Sequence[float | None]) -> list[float]:
    return [v for v in values if v is not None and math.isfinite(v)]


def _labels(runs: list[Path]) -> list[str]:
    """Each run's legend label: its path below the runs' common directory."""
    resolved = [r.resolve() for r in runs]
    common = Path(os.path.commonpath(resolved)) if len(runs) > 1 else resolved[0].parent
    return [str(r.relative_to(common)) if r != common else r.name for r in resolved]


def _out_path(out: str | Path | None, runs: list[Path], suffixes: set[str]) -> Path:
    """``out`` with an image suffix is the file written; any other path is a directory (created) for ``curves.png``;
    the default is ``RUN_DIR/curves.png`` for one run, ``curves.png`` in the working directory for several (their
    common directory may be ``/``, or one of the runs, whose own curves it would replace)."""
    if out is None:
        return runs[0] / "curves.png" if len(runs) == 1 else Path("curves.png")
    out = Path(out)
    if out.suffix.lower() in suffixes:
        return out
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file without an image suffix; name an image ({out}.png) or a directory")
    return out / "curves.png"


#: how a non-finite value is marked: a red x at the panel's edge (its y is in axes coordinates)
_NOT_FINITE = {"marker": "x", "color": "red", "s": 36, "clip_on": False, "zorder": 3, "label": "not finite"}


def plot_runs(
    run_dirs: Sequence[str | Path], out: str | Path | None = None, *, smooth: int = 0, title: str | None = None
) -> Path:
    """One panel per logged metric, each with a labelled y axis and integer step ticks, every run in its own colour
    (a legend names the runs when there are several); ``smooth`` > 1 overlays a trailing mean over the last
    ``smooth`` logged points of each metric. The title is the run's name (or the runs' names) unless given.
    Returns the path written (see :func:`_out_path`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    runs = [Path(d) for d in run_dirs]
    if not runs:
        raise ValueError("no run directories given")
    labels = _labels(runs)
    data = []
    for run in runs:
        rows = load_metrics(run)
        series, problems = _series(rows)
        _warn(str(run / "metrics.jsonl"), problems)
        data.append((rows, series))
    panels = [(k, t, y) for k, t, y in PANELS if any(_finite([v for _, v in s[k]]) for _, s in data)]
    if not panels:
        keys = sorted({k for rows, _ in data for r in rows for k in r})[:12]
        where = f"{runs[0]}/metrics.jsonl has" if len(runs) == 1 else "none of the runs' metrics.jsonl has"
        raise ValueError(f"{where} no plottable metrics yet (its keys: {', '.join(keys) or 'none'})")
    several = len(runs) > 1
    ncols = min(4, len(panels))
    nrows = (len(panels) + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.8 * ncols, 3.1 * nrows + 0.5 + 0.3 * several), squeeze=False)
    for ax in axes.flat[len(panels) :]:
        ax.remove()  # no empty frames in the last row
    any_bad = False
    for ax, (key, name, ylabel) in zip(axes.flat, panels, strict=False):
        steps: set[int] = set()
        values: list[float] = []
        for i, (_, series) in enumerate(data):
            pts = series[key]
            if not pts:
                continue
            xs = [s for s, _ in pts]
            ys = [v if v is not None and math.isfinite(v) else math.nan for _, v in pts]
            smoothed = smooth > 1 and len(ys) > 2
            style = {"alpha": 0.35, "linewidth": 1.0} if smoothed else {"linewidth": 1.2}
            size = 5 if len(_finite(ys)) == 1 else 2  # a lone point must be seen
            ax.plot(xs, ys, color=f"C{i}", marker="o", markersize=size, label="per step", **style)
            if smoothed:
                ax.plot(
                    xs, moving_average(ys, smooth), color=f"C{i}", linewidth=1.8, label=f"mean of last {smooth} points"
                )
            bad = [(s, v) for s, v in pts if v is not None and not math.isfinite(v)]
            if bad:  # at the panel's edge, whatever its y range: top, bottom for -inf
                any_bad = True
                edge = [0.0 if v == -math.inf else 1.0 for _, v in bad]
                ax.scatter([s for s, _ in bad], edge, transform=ax.get_xaxis_transform(), **_NOT_FINITE)
            steps.update(xs)
            values += _finite(ys)
        if key.rsplit("/", 1)[-1] in RATES and values and 0.0 <= min(values) and max(values) <= 1.0:
            ax.set_ylim(-0.05, 1.05)
        lo, hi = min(steps), max(steps)  # every logged step, the marked ones too; one step: integer ticks around it
        pad = (hi - lo) * 0.05 if hi > lo else 1
        ax.set_xlim(lo - pad, hi + pad)
        if not several and (len(ax.get_lines()) > 1 or ax.collections):  # a mean or a marked value: say which
            ax.legend(fontsize=6, loc="best")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
    if several:
        handles = [Line2D([], [], color=f"C{i}", label=label) for i, label in enumerate(labels)]
        if any_bad:
            handles.append(Line2D([], [], color="red", marker="x", linestyle="", label=_NOT_FINITE["label"]))
        fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 4), fontsize=8, frameon=False)
    default_title = labels[0] if not several else " vs ".join(labels) if len(labels) <= 3 else f"{len(labels)} runs"
    fig.suptitle(title or default_title, fontsize=11)
    fig.tight_layout(rect=(0, 0.06 if several else 0, 1, 1))
    out = _out_path(out, runs, {f".{ext}" for ext in fig.canvas.get_supported_filetypes()})
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def plot_run(run_dir: str | Path, out: str | Path | None = None, *, smooth: int = 0, title: str | None = None) -> Path:
    """:func:`plot_runs` for one run: ``RUN_DIR/curves.png`` by default."""
    return plot_runs([run_dir], out, smooth=smooth, title=title)
