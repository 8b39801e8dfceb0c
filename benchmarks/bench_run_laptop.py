"""Benchmark (issue 14, acceptance 2): each of the five methods end to end with `searchrl run --profile laptop`.

Measured, per method: the wall time of the whole `searchrl run --recipe R --profile laptop` process (model loads and
imports included), its exit status and peak resident memory, and each stage's own wall time and result as the
runner recorded them in OUT/summary.json (e.g. the last RL step's reward, the evaluation rows). Every stage runs
from scratch (the run directory is emptied first). Machine: whatever runs this (the CPU count is recorded).

The methods: Search-R1 (`search_r1_ppo` and `search_r1_grpo`), R1-Searcher (`r1_searcher_stage1` alone, and
`r1_searcher_stage2`, whose pipeline runs both stages), R1-Searcher++ (`r1_searcher_pp`), R-Search (`r_search`),
RAG-R1 (`rag_r1`).

Results: ``benchmarks/results/run_laptop.{json,md}``; run directories under ``runs/run_laptop/``.

Usage: flock /tmp/searchrl-cpu.lock python benchmarks/bench_run_laptop.py [recipe ...]
       python benchmarks/bench_run_laptop.py --collect   # only rebuild the report from existing run directories
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from searchrl.utils import write_portable

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
RUNS = ROOT / "runs" / "run_laptop"
METHODS = {
    "search_r1_ppo": "Search-R1 (PPO)",
    "search_r1_grpo": "Search-R1 (GRPO)",
    "r1_searcher_stage1": "R1-Searcher (stage 1 only)",
    "r1_searcher_stage2": "R1-Searcher (stage 1 + stage 2)",
    "r1_searcher_pp": "R1-Searcher++",
    "r_search": "R-Search",
    "rag_r1": "RAG-R1",
}


def run_one(recipe: str) -> dict:
    out = RUNS / recipe
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    cmd = [
        "/usr/bin/time",
        "-v",
        sys.executable,
        "-m",
        "searchrl",
        "run",
        "--recipe",
        recipe,
        "--profile",
        "laptop",
        "--out",
        str(out),
    ]
    env = {**os.environ, "SEARCHRL_NO_PROGRESS": "1"}
    t0 = time.perf_counter()
    with (out.parent / f"{recipe}.log").open("w") as log:
        timeout = int(os.environ.get("RUN_LAPTOP_TIMEOUT_S", "10800"))  # a loaded machine runs 5-10x slower
        proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT, timeout=timeout)
    wall = time.perf_counter() - t0
    text = (out.parent / f"{recipe}.log").read_text(errors="replace")
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    return {
        "recipe": recipe,
        "exit_code": proc.returncode,
        "wall_s": round(wall, 1),
        "peak_rss_mb": round(int(rss.group(1)) / 1024) if rss else None,
    }


def stage_rows(recipe: str) -> tuple[list[dict], str | None]:
    summary = RUNS / recipe / "summary.json"
    if not summary.exists():
        return [], None
    data = json.loads(summary.read_text())
    rows = []
    for s in data["stages"]:
        res = s.get("result") or {}
        note = ""
        if s["kind"] == "rl" and "reward/total" in res:
            note = f"step {int(res.get('step', 0))}, reward {res['reward/total']:.3f}"
        elif s["kind"] == "eval" and res.get("rows"):
            note = "; ".join(f"{r['method']} EM {r.get('em', float('nan')):.3f}" for r in res["rows"])
        elif s["kind"] == "sft" and "loss" in res:
            note = f"loss {res['loss']:.3f}"
        elif s["kind"] == "data":
            note = ", ".join(f"{k} {v}" for k, v in res.items() if isinstance(v, int | float))
        rows.append(
            {
                "stage": s["name"],
                "kind": s["kind"],
                "op": s.get("op"),
                "status": s["status"],
                "seconds": s["seconds"],
                "note": note,
            }
        )
    return rows, data.get("failed") or data.get("stopped")  # the stage the run ended at (its row says how)


def report(runs: list[dict]) -> None:
    for r in runs:
        rows, failed = stage_rows(r["recipe"])
        if rows or "stages" not in r:  # a run measured earlier keeps its stages when its directory is gone
            r["stages"], r["failed_stage"] = rows, failed
    meta = {
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "profile": "laptop",
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_portable(RESULTS / "run_laptop.json", json.dumps({"meta": meta, "runs": runs}, indent=2))
    lines = [
        "# `searchrl run --recipe R --profile laptop`: each method end to end",
        "",
        f"{meta['cpus']} CPUs ({meta['machine']}), Python {meta['python']}, {meta['date']} (load average at the end "
        f"{meta['load_average_at_end']}: other work shared the CPUs, so the times are upper bounds). Each run starts "
        "from an empty run directory; the whole process is timed (imports and model loads included). The laptop "
        "profile: bundled SmolLM2-135M-Instruct, BM25 over a 200-entity synthetic world, 2 RL steps of 2 prompts x 2 "
        "rollouts, 32 SFT examples, 8 evaluation questions (`src/searchrl/recipes/profiles/laptop.yaml`). The "
        "stage results show that each stage ran; at this size they say nothing about the methods' quality.",
        "",
        "| method | recipe | exit | wall time (s) | peak RSS (MB) | stages |",
        "|---|---|---|---|---|---|",
    ]
    for r in runs:
        stages = " -> ".join(f"{s['stage']} {s['seconds']:.0f}s" for s in r["stages"])
        how = next((s["status"] for s in r["stages"] if s["stage"] == r.get("failed_stage")), "failed")
        fail = f" ({how} at {r['failed_stage']})" if r.get("failed_stage") else ""
        lines.append(
            f"| {METHODS.get(r['recipe'], r['recipe'])} | `{r['recipe']}` | {r['exit_code']}{fail} | "
            f"{r['wall_s']} | {r['peak_rss_mb']} | {stages} |"
        )
    lines += ["", "## Stages", ""]
    for r in runs:
        lines += [f"### `{r['recipe']}`", "", "| stage | kind | op | seconds | result |", "|---|---|---|---|---|"]
        lines += [
            f"| {s['stage']} | {s['kind']} | {s['op'] or ''} | {s['seconds']} | {s['note']} |" for s in r["stages"]
        ]
        lines.append("")
    lines.append("Reproduce: `flock /tmp/searchrl-cpu.lock python benchmarks/bench_run_laptop.py`.")
    write_portable(RESULTS / "run_laptop.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> int:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    unknown = [a for a in args if a not in METHODS]
    if unknown:
        raise SystemExit(f"unknown method recipe(s) {unknown}; choose from {', '.join(METHODS)}")
    previous = {}
    if (RESULTS / "run_laptop.json").exists():
        previous = {r["recipe"]: r for r in json.loads((RESULTS / "run_laptop.json").read_text())["runs"]}
    if "--collect" in sys.argv:
        runs = list(previous.values())
    else:
        for recipe in args or list(METHODS):
            print(f"running {recipe} ...", flush=True)
            previous[recipe] = run_one(recipe)
            print(json.dumps(previous[recipe]), flush=True)
        runs = [previous[m] for m in METHODS if m in previous]
    report(runs)
    return 0 if all(r["exit_code"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
