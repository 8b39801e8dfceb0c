"""Run every benchmark in order; each writes benchmarks/results/<name>.{json,md}. `make bench` calls this.

    python benchmarks/run_all.py [name ...]     # default: all, in the order below

Some are long on a 2-core CPU (the 1M-passage BM25 start-up index takes minutes to build; SFT and GRPO runs take
tens of minutes). Each runs in its own process; a failure is reported and the others still run.
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
    "bench_engine_overhead",
    "bench_grpo_smollm",
    "bench_eval_2wiki",
    "bench_rescore_r1_searcher",
]


def main() -> int:
    names = sys.argv[1:] or ORDER
    failed = []
    for name in names:
        script = HERE / f"{name}.py"
        if not script.exists():
            print(f"skip {name}: {script} not found")
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
