"""Training curves from a run's metrics.jsonl: reward, response length and searches over steps (as in the papers)."""

from __future__ import annotations

import json
from pathlib import Path

PANELS = [
    ("reward/total", "reward"),
    ("rollout/em", "EM (rollouts)"),
    ("eval/em", "EM (held-out, greedy)"),
    ("eval/f1", "F1 (held-out, greedy)"),
    ("rollout/well_formed", "well-formed rate"),
    ("rollout/searches", "searches per trajectory"),
    ("rollout/response_len", "response length (tokens)"),
    ("kl/mean", "KL to reference"),
    ("time/step_s", "seconds per step"),
    ("loss", "SFT loss"),
    ("val_loss", "SFT validation loss"),
]


def load_metrics(run_dir: str | Path) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: point to a run directory written by `searchrl train`")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def plot_run(run_dir: str | Path, out: str | Path | None = None) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = load_metrics(run_dir)
    panels = [(k, t) for k, t in PANELS if any(k in r for r in rows)]
    if not rows or not panels:
        raise ValueError(f"{run_dir}/metrics.jsonl has no plottable metrics yet")
    ncols = min(4, len(panels))
    nrows = (len(panels) + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.6 * ncols, 3.0 * nrows), squeeze=False)
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    for ax, (key, title) in zip(axes.flat, panels, strict=False):
        pts = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=2, linewidth=1.2)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
    fig.tight_layout()
    out = Path(out) if out else Path(run_dir) / "curves.png"
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
