"""GRPO on the bundled SmolLM2-135M in the synthetic world (issue 7): N steps on this CPU, the curves and the
per-step time split (generation / retrieval / reward / log-probs / update).

    python benchmarks/bench_grpo_smollm.py [--steps 20] [--init runs/coldstart/final] [--out runs/grpo-demo]
                                           [--coldstart N] [--coldstart-epochs 2]

Without a cold-start model at --init, ``--coldstart N`` first runs a short SFT on N oracle trajectories
(``searchrl sft --recipe demo sft.limit=N sft.epochs=E``, into runs/coldstart-quick) so the policy searches; with
N = 0 it trains the bundled model as it is.

Writes benchmarks/results/grpo_smollm.{json,md} and <out>/curves.png.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from searchrl.utils import write_portable

RESULTS = Path(__file__).parent / "results"
TIMES = ["time/generate_s", "time/retrieve_s", "time/reward_s", "time/logprob_s", "time/update_s", "time/step_s"]
COLS = ["step", "reward/total", "rollout/searches", "rollout/response_len", *TIMES]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--init", default="runs/coldstart/final")
    ap.add_argument("--out", default="runs/grpo-demo", help="run directory (deleted and re-created)")
    ap.add_argument("--coldstart", type=int, default=0, help="quick SFT on N oracle trajectories if --init is absent")
    ap.add_argument("--coldstart-epochs", type=int, default=2)
    ap.add_argument("overrides", nargs="*", help="extra dotted overrides for the demo recipe")
    args = ap.parse_args()
    coldstart = None
    if not Path(args.init, "config.json").exists() and args.coldstart > 0:
        quick = Path("runs/coldstart-quick")
        t0 = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "searchrl.cli",
                "sft",
                "--recipe",
                "demo",
                f"sft.limit={args.coldstart}",
                f"sft.epochs={args.coldstart_epochs}",
                "--out",
                str(quick),
            ],
            check=True,
        )
        coldstart = {
            "trajectories": args.coldstart,
            "epochs": args.coldstart_epochs,
            "seconds": round(time.perf_counter() - t0, 1),
        }
        args.init = str(quick / "final")
    init = [f"training.init_from={args.init}"] if Path(args.init, "config.json").exists() else []
    cmd = [
        sys.executable,
        "-m",
        "searchrl.cli",
        "train",
        "--recipe",
        "demo",
        f"training.steps={args.steps}",
        f"training.output_dir={args.out}",
        "training.save_every=10",
        *init,
        *args.overrides,
    ]
    shutil.rmtree(args.out, ignore_errors=True)  # a fresh run: the trainer appends to an existing metrics file
    subprocess.run(cmd, check=True)
    from searchrl.viz.plots import load_metrics, plot_run

    rows = load_metrics(args.out)
    png = plot_run(args.out)
    mean = {k: sum(r[k] for r in rows) / len(rows) for k in TIMES}
    first, last = rows[: max(1, len(rows) // 4)], rows[-max(1, len(rows) // 4) :]

    def avg(rs, k):
        return sum(r.get(k, 0.0) for r in rs) / len(rs)

    result = {
        "steps": len(rows),
        "init_from": init[0].split("=", 1)[1] if init else "bundled model",
        "quick_coldstart": coldstart,
        "mean_time_split_s": {k.split("/")[1]: round(v, 2) for k, v in mean.items()},
        "reward_first_quarter": avg(first, "reward/total"),
        "reward_last_quarter": avg(last, "reward/total"),
        "searches_first_quarter": avg(first, "rollout/searches"),
        "searches_last_quarter": avg(last, "rollout/searches"),
        "curves": str(png),
        "per_step": [{k: r.get(k) for k in COLS} for r in rows],
    }
    RESULTS.mkdir(exist_ok=True)
    write_portable(RESULTS / "grpo_smollm.json", json.dumps(result, indent=2))
    how = (
        f", a {coldstart['seconds']:.0f} s SFT on {coldstart['trajectories']} oracle trajectories" if coldstart else ""
    )
    md = [
        f"# GRPO, SmolLM2-135M, synthetic world: {len(rows)} steps (init: {result['init_from']}{how})",
        "",
        "Mean seconds per step: " + ", ".join(f"{k} {v}" for k, v in result["mean_time_split_s"].items()) + ".",
        f"`python benchmarks/bench_grpo_smollm.py {' '.join(sys.argv[1:])}`",
        "",
        "| step | reward | searches | response len | generate s | retrieve s | reward s | logprob s | update s "
        "| step s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        md.append("| " + " | ".join(f"{r.get(k, 0):.3g}" for k in COLS) + " |")
    write_portable(RESULTS / "grpo_smollm.md", "\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
