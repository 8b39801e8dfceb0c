"""Cold starts on the synthetic world against a CPU-time budget (issue 16: world dev EM >= 0.6 within 30 CPU-minutes).

    python benchmarks/bench_coldstart_budget.py --budget-cpu-s 1800 RUN_DIR [RUN_DIR ...]
    # each RUN_DIR from: searchrl run --recipe multihop_world --out RUN_DIR \
    #     --only world --only world_index --only coldstart --only coldstart_eval [overrides...]

For each run it reads what the run measured, nothing typed in by hand:

- the wall and CPU time of the stages up to the cold start (``world``, ``world_index``, ``coldstart``: their
  ``DONE`` files; the evaluation is not part of the budget);
- the SFT settings that differ between the runs (``coldstart/config.yaml``), and the SFT's tokens per second;
- the agent's greedy EM per question kind on the world's dev questions (``coldstart_eval/summary.json``);

and writes ``benchmarks/results/coldstart_budget.{json,md}``, one row per run, with whether it is within the budget
and at or above the target EM.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml
from bench_multihop_world import per_kind

from searchrl.utils import write_portable

RESULTS = Path(__file__).parent / "results"
SFT_KEYS = (
    "oracle_plan",
    "limit",
    "oracle_first_turns",
    "batch_size",
    "lr",
    "freeze_layers",
    "oracle_balance",
    "oracle_topk",
    "lr_schedule",
    "oracle_mix",
)


def measure(run: Path) -> dict:
    done = {n: json.loads((run / n / "DONE").read_text()) for n in ("world", "world_index", "coldstart")}
    sft = yaml.safe_load((run / "coldstart" / "config.yaml").read_text())["sft"]
    kinds = per_kind(json.loads((run / "coldstart_eval" / "summary.json").read_text()))
    return {
        "run": str(run),
        "sft": {k: sft.get(k) for k in SFT_KEYS},
        "wall_s": round(sum(d["seconds"] for d in done.values()), 1),
        "cpu_s": round(sum(d.get("cpu_seconds") or 0 for d in done.values()), 1),
        "sft_tokens_per_s": round(done["coldstart"]["result"]["tokens_per_s"], 1),
        "em": {k: round(v["em"], 3) for k, v in kinds.items()},
        "n": {k: v["n"] for k, v in kinds.items()},
        "well_formed": kinds["all"]["well_formed"],
    }


def _questions(rows: list[dict]) -> str:
    """How many dev questions the runs' cold starts were scored on (their evaluations' own counts)."""
    counts = sorted({r["n"]["all"] for r in rows})
    return " / ".join(map(str, counts))


def render(rows: list[dict], budget: float, target: float) -> str:
    kinds = [k for k in rows[0]["em"] if k not in ("all", "multi_hop")]
    cols = [*kinds, "all"]
    lines = [
        "# Cold starts on the synthetic world against a CPU-time budget",
        "",
        f"Target: world dev EM >= {target} over all kinds within {budget:.0f} CPU-seconds (world + index + SFT; "
        "2 cores, so CPU seconds are about twice the wall seconds). Each run: `searchrl run --recipe multihop_world "
        "--out RUN --only world --only world_index --only coldstart --only coldstart_eval` plus the SFT settings "
        f"shown; {_questions(rows)} world dev questions, greedy, BM25 top-3. Report: "
        "`python benchmarks/bench_coldstart_budget.py RUN...`.",
        "",
        "| run | SFT settings | wall s | CPU s | tokens/s | "
        + " | ".join(f"{k} ({rows[0]['n'][k]})" for k in cols)
        + " | well-formed | met |",
        "|---" * (len(cols) + 7) + "|",
    ]
    for r in rows:
        s = r["sft"]
        mix = s.get("oracle_mix") or {}
        whole = f"{sum(mix.values())} whole ({', '.join(f'{k} {n}' for k, n in mix.items())})" if mix else None
        setting = f"{s['oracle_plan']}, {whole or str(s['limit']) + ' whole'} + {s['oracle_first_turns']} first turns"
        setting += f", batch {s['batch_size']}"
        setting += "".join(f", {k} {s[k]}" for k in ("freeze_layers", "oracle_balance", "oracle_topk") if s.get(k))
        setting += f", lr {s['lr_schedule']}" if (s.get("lr_schedule") or "constant") != "constant" else ""
        met = r["cpu_s"] <= budget and r["em"]["all"] >= target
        lines.append(
            f"| {Path(r['run']).name} | {setting} | {r['wall_s']:.0f} | {r['cpu_s']:.0f} | "
            f"{r['sft_tokens_per_s']:.0f} | "
            + " | ".join(f"{r['em'][k]:.2f}" for k in cols)
            + f" | {r['well_formed']:.2f} | {'yes' if met else 'no'} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="+", help="run directories with coldstart and coldstart_eval stages")
    ap.add_argument("--budget-cpu-s", type=float, default=1800.0)
    ap.add_argument("--target-em", type=float, default=0.6)
    ap.add_argument("--results", default=str(RESULTS))
    ap.add_argument(
        "--append",
        action="store_true",
        help="keep the rows already in the results file (a row of the same run directory name is replaced)",
    )
    args = ap.parse_args()
    rows = [measure(Path(r)) for r in args.runs]
    old = Path(args.results) / "coldstart_budget.json"
    if args.append and old.exists():
        names = {Path(r["run"]).name for r in rows}
        rows = [r for r in json.loads(old.read_text())["runs"] if Path(r["run"]).name not in names] + rows
    out = {"budget_cpu_s": args.budget_cpu_s, "target_em": args.target_em, "runs": rows}
    results = Path(args.results)
    write_portable(results / "coldstart_budget.json", json.dumps(out, indent=2) + "\n")
    write_portable(results / "coldstart_budget.md", render(rows, args.budget_cpu_s, args.target_em))
    print(render(rows, args.budget_cpu_s, args.target_em))


if __name__ == "__main__":
    main()
