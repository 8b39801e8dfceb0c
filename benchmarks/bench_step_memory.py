"""Benchmark (issue 12, acceptance "peak memory is no higher than today's"): peak RSS and step time of the issue's
RL-step command, on the code before the fast-step work and on this checkout, one after the other in one run.

The command (both sides, identical): ``searchrl train --recipe demo`` on 2wiki-mini dev, 4 prompts x group 4, one
turn, <= 64 new tokens, KL 0.001, one optimizer step per RL step, lr 1e-6, ``--steps`` RL steps. The baseline's code
comes from ``git archive <--baseline>`` into a temp dir and runs with ``PYTHONPATH`` on it (same virtualenv, same
model, same data copy); this checkout runs from ``src/``. The data directory is copied to a temp dir first, so
nothing is written into it (the baseline's code builds its index beside the data). Peak RSS is the whole process's
(``/usr/bin/time -v``, max resident set size); step times are the medians of the trainer's own ``time/step_s`` and
phase times after the first step.

    flock /tmp/searchrl-cpu.lock python benchmarks/bench_step_memory.py [--steps 3] [--baseline e86f3fc]

Writes benchmarks/results/step_memory.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from searchrl.utils import write_portable

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results"
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "2wiki-mini"
#: the parent of the first commit of the issue's work ("Fast RL step: own HF decode loop ...", 30833ba)
BASELINE = "e86f3fc"
ISSUE_ARGS = [
    "training.prompts_per_step=4",
    "rollout.group_size=4",
    "rollout.max_new_tokens=64",
    "rollout.max_turns=1",
    "rollout.max_searches=0",
    "rollout.force_answer=false",
    "algorithm.mini_batch_size=16",
    "training.lr=1e-6",
    "algorithm.kl_coef=0.001",
]
PHASES = ("generate", "logprob", "update", "step")


def export_commit(commit: str, dest: Path) -> Path:
    """``src/`` of ``commit`` (git archive) under ``dest``; the path to put on PYTHONPATH."""
    dest.mkdir(parents=True, exist_ok=True)
    archive = dest / "src.tar"
    subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", "-o", str(archive), commit, "src"], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    return dest / "src"


def run_side(name: str, src: Path, data: Path, steps: int, tmp: Path) -> dict:
    out = tmp / name
    cmd = [
        "/usr/bin/time",
        "-v",
        sys.executable,
        "-m",
        "searchrl.cli",
        "train",
        "--recipe",
        "demo",
        f"data.source={data}",
        "data.train=dev.jsonl",
        *ISSUE_ARGS,
        f"training.steps={steps}",
        f"training.output_dir={out}",
    ]
    env = {**os.environ, "PYTHONPATH": str(src), "SEARCHRL_NO_PROGRESS": "1"}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp, timeout=3600)
    wall = time.perf_counter() - t0
    text = proc.stdout + proc.stderr
    (tmp / f"{name}.log").write_text(text)
    if proc.returncode != 0:
        tail = text.strip().splitlines()[-5:]
        raise SystemExit(f"{name} run failed ({proc.returncode}):\n" + "\n".join(tail))
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rows = [r for r in rows if "time/step_s" in r][1:] or rows  # first step dropped (warm-up)
    med = {p: round(statistics.median(r.get(f"time/{p}_s", float("nan")) for r in rows), 2) for p in PHASES}
    return {
        "peak_rss_mb": round(int(rss.group(1)) / 1024) if rss else None,
        "wall_s": round(wall, 1),
        "median_s": med,
        "steps_timed": len(rows),
        "src": str(src),
        # the scratch directory (the data copy, the output) is this run's own: named, not its machine path
        "command": " ".join(cmd[2:]).replace(str(tmp), "<tmp>"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--baseline", default=BASELINE, help="commit whose code is 'today's' (before the fast-step work)")
    ap.add_argument("--data", default=str(DEFAULT_DATA), help="a FlashRAG directory with dev.jsonl and corpus.jsonl")
    args = ap.parse_args()
    data_src = Path(args.data)
    if not (data_src / "dev.jsonl").is_file():
        raise SystemExit(f"--data {data_src}: no dev.jsonl there (2wiki-mini lives in ../shared/data/2wiki-mini)")
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    with tempfile.TemporaryDirectory(prefix="step-memory-") as t:
        tmp = Path(t)
        data = tmp / "data"
        data.mkdir()
        for f in ("dev.jsonl", "corpus.jsonl"):
            shutil.copy(data_src / f, data / f)
        base_src = export_commit(args.baseline, tmp / "baseline")
        sides = {}
        for name, src in (("baseline", base_src), ("current", ROOT / "src")):
            print(f"running {name} ({src}) ...", flush=True)
            shutil.rmtree(data / "index-bm25", ignore_errors=True)  # each side builds its own index
            sides[name] = run_side(name, src, data, args.steps, tmp)
            print(json.dumps(sides[name]), flush=True)
    b, c = sides["baseline"], sides["current"]
    result = {
        "meta": {
            "cpus": os.cpu_count(),
            "machine": platform.machine(),
            "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d %H:%M"),
            "steps": args.steps,
            "baseline": args.baseline,
            "current": head.stdout.strip(),
        },
        "baseline": b,
        "current": c,
        "peak_rss_ratio": round(c["peak_rss_mb"] / b["peak_rss_mb"], 3),
        "met": c["peak_rss_mb"] <= b["peak_rss_mb"],
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_portable(RESULTS / "step_memory.json", json.dumps(result, indent=2) + "\n")
    m = result["meta"]
    lines = [
        "# RL step: peak memory and step time before and after the fast-step work",
        "",
        f"{m['cpus']} CPUs ({m['machine']}), Python {m['python']}, {m['date']}. One run: the baseline's code "
        f"(`{m['baseline']}`, before the fast-step work) then this checkout (`{m['current']}`), {m['steps']} RL steps "
        "each, same virtualenv, model and data copy. Step times: medians after the first step.",
        "",
        "| code | peak RSS (MB) | s / step | generate | log-probs | update | process wall (s) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, s in (("baseline " + m["baseline"], b), ("current " + m["current"], c)):
        md = s["median_s"]
        lines.append(
            f"| {name} | {s['peak_rss_mb']} | {md['step']} | {md['generate']} | {md['logprob']} | "
            f"{md['update']} | {s['wall_s']} |"
        )
    lines += [
        "",
        f"Peak RSS current / baseline: **{result['peak_rss_ratio']}** (target <= 1: "
        f"{'met' if result['met'] else 'NOT met'}).",
        "",
        "Command (both sides; the baseline with PYTHONPATH on its exported `src/`):",
        "",
        "```",
        f"flock /tmp/searchrl-cpu.lock python benchmarks/bench_step_memory.py --steps {m['steps']} "
        f"--baseline {m['baseline']}",
        c["command"],
        "```",
    ]
    write_portable(RESULTS / "step_memory.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
