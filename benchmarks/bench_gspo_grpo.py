"""GRPO against GSPO (and Dr. GRPO), and BM25 against simulated search, from one cold start on the synthetic world.

    python benchmarks/bench_gspo_grpo.py [--out runs/gspo_grpo] [--steps 10] [--algorithms grpo,gspo,grpo_simulated]
    python benchmarks/bench_gspo_grpo.py --algorithms grpo,gspo,grpo_simulated:4   # an arm with its own step count

An arm is an algorithm name (``grpo``, ``gspo``, ``dr_grpo``, ...), optionally with ``_simulated``: that arm's RL
stage searches a simulated engine (``retrieval.kind=simulated``: the bundled model writes each query's documents,
with ZeroSearch's noise curriculum) instead of the world's BM25 index; its evaluation still searches BM25.

One ``searchrl run --recipe multihop_world --profile laptop`` pipeline: the world, its BM25 index and the laptop
cold start once; then for each algorithm an RL stage of ``--steps`` steps from that cold start on the world's
multi-hop training questions, each followed by a greedy evaluation of the agent on the world's dev questions
(``--eval-limit``). Reads what the run recorded (OUT/summary.json, each RL stage's metrics.jsonl) and writes
``benchmarks/results/gspo_grpo.{json,md}``: per algorithm the RL stage's wall time, its reward over the first and
last steps, and the dev EM / F1 after it. At the laptop profile's size (2 questions x 2 rollouts a step) one run says
whether each algorithm runs and roughly where it lands, not which is better.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

from searchrl.utils import write_portable

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def arm_steps(arm: str, steps: int) -> tuple[str, int]:
    """``name[:steps]`` -> (name, steps): an arm may set its own number of RL steps (default ``--steps``)."""
    name, _, own = arm.partition(":")
    if own and not own.isdigit():
        raise SystemExit(f"arm {arm!r}: write name:steps with a whole number of steps, e.g. grpo_simulated:4")
    return name, int(own) if own else steps


def pipeline(algorithms: list[str], steps: int, eval_limit: int) -> list[dict]:
    stages: list[dict] = [
        {"name": "world", "kind": "data", "op": "synth"},
        {"name": "world_index", "kind": "data", "op": "index", "data": "${world}/corpus.jsonl"},
        {"name": "coldstart", "kind": "sft"},
    ]
    for arm in algorithms:
        algo, n_steps = arm_steps(arm, steps)
        settings = {
            "algorithm.name": algo.removesuffix("_simulated"),
            "training.steps": n_steps,
            "data.dev": "${world}/dev.jsonl",
            "data.kinds": ["bridge", "three_hop", "comparison"],
        }
        if algo.endswith("_simulated"):
            settings["retrieval.kind"] = "simulated"
        stages.append(
            {
                "name": f"rl_{algo}",
                "kind": "rl",
                "init_from": "${coldstart}",
                "data": "${world}/train.jsonl",
                "set": settings,
            }
        )
        stages.append(
            {
                "name": f"eval_{algo}",
                "kind": "eval",
                "data": ["${world}/dev.jsonl"],
                "set": {"evaluation.methods": ["agent"], "evaluation.limit": eval_limit},
            }
        )
    return stages


def done_seconds(out: Path, name: str, stage: dict) -> float:
    """A stage's wall time: its DONE marker's (a stage skipped by this invocation ran in an earlier one, and the
    run summary then says 0 s)."""
    done = out / name / "DONE"
    return json.loads(done.read_text())["seconds"] if done.exists() else stage["seconds"]


def agent_row(result: dict) -> dict:
    rows = [r for r in result.get("rows", []) if r.get("method") == "agent"]
    return rows[0] if rows else {}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "runs" / "gspo_grpo"))
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--eval-limit", type=int, default=25)
    ap.add_argument("--algorithms", default="grpo,gspo,grpo_simulated")
    ap.add_argument("--collect", action="store_true", help="only rebuild the report from an existing run")
    args = ap.parse_args()
    arms = args.algorithms.split(",")
    algorithms = [arm_steps(a, args.steps)[0] for a in arms]
    out = Path(args.out)
    cmd = [
        sys.executable,
        "-m",
        "searchrl",
        "run",
        "--recipe",
        "multihop_world",
        "--profile",
        "laptop",
        "--out",
        str(out),
        "pipeline=" + json.dumps(pipeline(arms, args.steps, args.eval_limit)),
    ]
    t0 = time.perf_counter()
    if not args.collect:
        subprocess.run(cmd, check=True)
    wall = time.perf_counter() - t0
    summary = json.loads((out / "summary.json").read_text())
    stages = {s["name"]: s for s in summary["stages"]}
    runs = {}
    for algo in algorithms:
        rl, ev = stages[f"rl_{algo}"], stages[f"eval_{algo}"]
        metrics = [json.loads(x) for x in (out / f"rl_{algo}" / "metrics.jsonl").read_text().splitlines()]
        rewards = [m["reward/total"] for m in metrics if "reward/total" in m]
        k = max(1, len(rewards) // 3)
        row = agent_row(ev.get("result", {}))
        runs[algo] = {
            "rl_seconds": done_seconds(out, f"rl_{algo}", rl),
            "steps": len(rewards),
            "reward_first": sum(rewards[:k]) / k,
            "reward_last": sum(rewards[-k:]) / k,
            "dev_em": row.get("em"),
            "dev_f1": row.get("f1"),
            "dev_n": row.get("n"),
            "training_search": "simulated" if algo.endswith("_simulated") else "bm25",
            "searches_per_question": row.get("searches_per_q", row.get("searches")),
        }
    res = {
        "meta": {
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": f"{platform.machine()}, {len(__import__('os').sched_getaffinity(0))} CPUs",
            "load_avg": list(__import__("os").getloadavg()),
            "wall_s": round(wall, 1),
            "command": " ".join(cmd[:-1]) + " pipeline=<world, world_index, coldstart, rl_<algo> + eval_<algo> each>",
            "cold_start_seconds": done_seconds(out, "coldstart", stages["coldstart"]),
        },
        "runs": runs,
    }
    write_portable(RESULTS / "gspo_grpo.json", json.dumps(res, indent=1))
    # the evaluations' own counts (--collect reads a run whose --eval-limit this invocation does not know)
    n_dev = " / ".join(str(n) for n in sorted({r["dev_n"] for r in runs.values() if r["dev_n"] is not None})) or "-"
    lines = [
        "# RL arms from one cold start on the synthetic world: GRPO, GSPO, simulated search",
        "",
        f"{res['meta']['date']}, {res['meta']['machine']}, load average {res['meta']['load_avg'][0]:.1f} at the end. "
        f"`python benchmarks/bench_gspo_grpo.py --steps {args.steps} --algorithms {args.algorithms}`: "
        "`searchrl run --recipe multihop_world "
        "--profile laptop` with one RL stage per algorithm from the same cold start, each on the world's multi-hop "
        f"training questions (2 questions x 2 rollouts a step), then a greedy evaluation of the agent on "
        f"{n_dev} world dev questions with the world's BM25 index. An arm named `*_simulated` trained "
        "against a simulated search engine (`retrieval.kind=simulated`: the bundled model writes each query's "
        "documents, with ZeroSearch's noise curriculum); its reward column is measured on those simulated "
        "documents, its dev EM on BM25. One run each: at this size it shows that each arm trains and where it "
        "lands, not which is better.",
        "",
        "| arm | search in training | RL steps | RL seconds | reward, first third of steps | reward, last third "
        "| dev EM (BM25) | dev F1 (BM25) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for algo, r in runs.items():
        em = "-" if r["dev_em"] is None else f"{r['dev_em']:.3f}"
        f1 = "-" if r["dev_f1"] is None else f"{r['dev_f1']:.3f}"
        lines.append(
            f"| `{algo}` | {r['training_search']} | {r['steps']} | {r['rl_seconds']:.0f} "
            f"| {r['reward_first']:.3f} | {r['reward_last']:.3f} | {em} | {f1} |"
        )
    write_portable(RESULTS / "gspo_grpo.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
