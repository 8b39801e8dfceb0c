"""Training curves from a run's metrics.jsonl: reward, response length and searches over steps (as in the papers)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from searchrl.utils import console

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


def load_metrics(run_dir: str | Path) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: point to a run directory written by `searchrl train`")
    lines = path.read_text(encoding="utf-8").splitlines()
    rows = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            if i == len(lines):  # a run still writing its last line: plot what is complete
                break
            raise ValueError(f"{path}:{i}: not valid JSON ({err.msg}); fix or remove that line") from None
        if not isinstance(row, dict):
            raise ValueError(f"{path}:{i}: not a JSON object of metrics; fix or remove that line")
        rows.append(row)
    return rows


def moving_average(values: list[float], window: int) -> list[float]:
    """Trailing mean over the last ``window`` values (fewer at the start); ``window <= 1`` returns the values.

    >>> moving_average([1.0, 3.0, 5.0, 7.0], 2)
    [1.0, 2.0, 4.0, 6.0]
    """
    if window <= 1:
        return list(values)
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def _finite(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _points(rows: list[dict], key: str) -> list[tuple[float, float]]:
    """(step, value) pairs with a finite number for ``key``, in step order, the last value of a step that a resumed
    run logged again (``metrics.jsonl`` is appended to); a panel with none is not drawn."""
    by_step: dict[float, float] = {}
    for r in rows:
        v, s = r.get(key), r.get("step")
        if _finite(v) and isinstance(s, int | float):
            by_step[s] = float(v)
    return sorted(by_step.items())


def plot_run(run_dir: str | Path, out: str | Path | None = None, *, smooth: int = 0, title: str | None = None) -> Path:
    """One panel per logged metric, each with a labelled y axis and integer step ticks; ``smooth`` > 1 overlays a
    trailing moving average over that many points. The title is the run's name (its directory) unless given."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    rows = load_metrics(run_dir)
    panels = [(k, t, y, pts) for k, t, y in PANELS if (pts := _points(rows, k))]
    if not rows or not panels:
        keys = sorted({k for r in rows for k in r})[:12]
        raise ValueError(
            f"{run_dir}/metrics.jsonl has no plottable metrics yet (its keys: {', '.join(keys) or 'none'})"
        )
    lost = sum(1 for r in rows for k, _, _ in PANELS if k in r and not _finite(r[k]))
    if lost:  # NaN / inf are logged as null: a run that blew up must not look smooth
        console.log(
            f"[yellow]warning:[/yellow] {lost} logged values are not finite numbers (NaN, inf) and are not drawn"
        )
    ncols = min(4, len(panels))
    nrows = (len(panels) + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.8 * ncols, 3.1 * nrows + 0.5), squeeze=False)
    for ax in axes.flat[len(panels) :]:
        ax.remove()  # no empty frames in the last row
    for ax, (_key, name, ylabel, pts) in zip(axes.flat, panels, strict=False):
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        raw_style = {"alpha": 0.35, "linewidth": 1.0} if smooth > 1 and len(ys) > 2 else {"linewidth": 1.2}
        ax.plot(xs, ys, marker="o", markersize=2, label="per step", **raw_style)
        if smooth > 1 and len(ys) > 2:
            ax.plot(xs, moving_average(ys, smooth), linewidth=1.8, label=f"mean of last {smooth}")
            ax.legend(fontsize=6, loc="best")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
    fig.suptitle(title or Path(run_dir).resolve().name, fontsize=11)
    fig.tight_layout()
    out = Path(out) if out else Path(run_dir) / "curves.png"
    out = out / "curves.png" if out.is_dir() else out if out.suffix else out.with_suffix(".png")  # the path written
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
