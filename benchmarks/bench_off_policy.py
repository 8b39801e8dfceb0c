"""On-policy GRPO against one-step off-policy GRPO (``training.off_policy_steps=1``): the same RL steps from one cold
start on the synthetic world, timed per step, then the held-out EM of each.

    python benchmarks/bench_off_policy.py [--out runs/off_policy] [--steps 8] [--eval-limit 25] [--threads N]
    python benchmarks/bench_off_policy.py --smoke      # a few minutes: checks that it runs, writes no result

One ``searchrl run --recipe multihop_world --profile laptop`` pipeline: the world, its BM25 index and the laptop cold
start once; then two RL stages of ``--steps`` GRPO steps from that cold start on the world's multi-hop training
questions (2 questions x 2 rollouts a step), identical but for ``training.off_policy_steps`` (0, then 1), each
followed by a greedy evaluation of the agent on the world's dev questions (``--eval-limit``). DAPO's refill is off in
both (``algorithm.max_sampling_rounds=1``), so a step samples the same number of questions in both arms and the times
compare like for like. The default 8 steps are sized for roughly 10 minutes an arm on 2 idle cores (the laptop
profile's GRPO steps take 60-90 s there). Reads what the run recorded (OUT/summary.json, each RL stage's
metrics.jsonl) and writes ``benchmarks/results/off_policy.{json,md}``: per arm the mean wall time of a step (all
steps, and the steps after the first, which the off-policy arm cannot overlap), the steps' total and the stage's
(model loading and saving included) with its CPU seconds, the trainer's mean wait for the background rollout, and
the dev EM / F1 after the RL stage.

Torch threads (CPU): the on-policy arm runs every phase with all of torch's intra-op threads (one per core). In the
off-policy arm the trainer gives the update the larger half of them and the background rollout the other half while
both run (one each on 2 cores), and the trainer thread all of them whenever no rollout runs (the first and last
steps); two full-size thread pools on the same cores would only contend. Whether the overlap pays on a CPU depends
on the cores: on 2 cores each phase loses half its threads, and only the part of the rollout that cannot use two
threads well (the decode loop's Python and small matmuls, the searches) is won back. The overlap is meant for a GPU,
where decoding leaves the device mostly idle. When other work holds the cores, OpenMP threads that spin-wait for each
other can make two threads per phase slower than one: ``--threads 1`` (OMP_NUM_THREADS=1 for the run; results in
``off_policy_threads1.{json,md}``) gives the on-policy control with one thread per phase, the off-policy arm then
running one thread per phase on each of two cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from searchrl.utils import write_portable

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
ARMS = {"on_policy": 0, "off_policy": 1}
#: --smoke: a cold start of a few examples and short rollouts, only to check that the pipeline runs
SMOKE = {
    "sft.limit": 4,
    "sft.oracle_first_turns": 0,
    "rollout.max_new_tokens": 24,
    "rollout.max_turns": 2,
}


def pipeline(steps: int, eval_limit: int, smoke: bool) -> list[dict]:
    coldstart: dict = {"name": "coldstart", "kind": "sft"}
    if smoke:
        coldstart["set"] = {k: v for k, v in SMOKE.items() if k.startswith("sft.")}
    stages: list[dict] = [
        {"name": "world", "kind": "data", "op": "synth"},
        {"name": "world_index", "kind": "data", "op": "index", "data": "${world}/corpus.jsonl"},
        coldstart,
    ]
    for arm, off in ARMS.items():
        rl_set = {
            "algorithm.name": "grpo",
            "algorithm.drop_uniform_groups": False,
            "algorithm.max_sampling_rounds": 1,
            "training.steps": steps,
            "training.save_every": 0,
            "training.off_policy_steps": off,
            "data.dev": "${world}/dev.jsonl",
            "data.kinds": ["bridge", "three_hop", "comparison"],
        }
        if smoke:
            rl_set.update({k: v for k, v in SMOKE.items() if k.startswith("rollout.")})
        train = "${world}/train.jsonl"
        stages.append({"name": f"rl_{arm}", "kind": "rl", "init_from": "${coldstart}", "data": train, "set": rl_set})
        ev_set: dict = {"evaluation.methods": ["agent"], "evaluation.limit": eval_limit}
        stages.append({"name": f"eval_{arm}", "kind": "eval", "data": ["${world}/dev.jsonl"], "set": ev_set})
    return stages


def agent_row(result: dict) -> dict:
    rows = [r for r in result.get("rows", []) if r.get("method") == "agent"]
    return rows[0] if rows else {}


def mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def arm_result(out: Path, stages: dict, arm: str) -> dict:
    rl, ev = stages[f"rl_{arm}"], stages[f"eval_{arm}"]
    lines = (out / f"rl_{arm}" / "metrics.jsonl").read_text().splitlines()
    steps = [m for m in map(json.loads, lines) if "time/step_s" in m]
    step_s = [m["time/step_s"] for m in steps]
    row = agent_row(ev.get("result", {}))
    return {
        "steps": len(steps),
        "step_s_mean": mean(step_s),
        "step_s_mean_after_first": mean(step_s[1:]),
        "steps_total_s": sum(step_s),
        "rl_stage_s": rl["seconds"],
        "rl_stage_cpu_s": rl.get("cpu_seconds"),
        "rollout_wait_s_mean": mean([m["time/rollout_wait_s"] for m in steps[1:] if "time/rollout_wait_s" in m]),
        "generate_s_mean": mean([m["time/generate_s"] for m in steps]),
        "update_s_mean": mean([m["time/update_s"] for m in steps]),
        "staleness": [m.get("rollout/staleness", 0.0) for m in steps],
        "reward_mean": mean([m["reward/total"] for m in steps]),
        "dev_em": row.get("em"),
        "dev_f1": row.get("f1"),
        "dev_n": row.get("n"),
    }


def fmt(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def report(res: dict, args: argparse.Namespace) -> str:
    meta = res["meta"]

    # what the run did (--collect reads a run made with settings this invocation does not know)
    def measured(key: str) -> str:
        return " / ".join(sorted({str(r[key]) for r in res["runs"].values() if r.get(key) is not None})) or "-"

    steps, n_dev = measured("steps"), measured("dev_n")
    lines = [
        "# One-step off-policy rollouts against on-policy GRPO on the synthetic world",
        "",
        f"{meta['date']}, {meta['machine']}, torch threads {meta['torch_threads']}, load average "
        f"{meta['load_avg'][0]:.1f} at the end. `python benchmarks/bench_off_policy.py --steps {steps}"
        f"{f' --threads {args.threads}' if args.threads else ''}`: "
        "`searchrl run --recipe multihop_world --profile laptop`, one cold start, then the same "
        f"{steps} GRPO steps (2 questions x 2 rollouts, no refill) on-policy and with "
        "`training.off_policy_steps=1`, each followed by a greedy evaluation of the agent on "
        f"{n_dev} world dev questions. Step times are the trainer's (`time/step_s`: waiting for the "
        "rollout included); the stage time adds model loading and saving. One run each.",
        "",
        "| arm | steps | s / step | s / step after the first | steps total s | stage s | mean rollout wait s "
        "| stage CPU s | generate s / step | update s / step | dev EM | dev F1 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for arm, r in res["runs"].items():
        lines.append(
            f"| `{arm}` | {r['steps']} | {fmt(r['step_s_mean'])} | {fmt(r['step_s_mean_after_first'])} "
            f"| {fmt(r['steps_total_s'], 0)} | {fmt(r['rl_stage_s'], 0)} | {fmt(r['rollout_wait_s_mean'])} "
            f"| {fmt(r['rl_stage_cpu_s'], 0)} "
            f"| {fmt(r['generate_s_mean'])} | {fmt(r['update_s_mean'])} | {fmt(r['dev_em'], 3)} "
            f"| {fmt(r['dev_f1'], 3)} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=None, help="the run directory (default runs/off_policy, --smoke: runs/...)")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--eval-limit", type=int, default=25)
    ap.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS of the run (default: one per core)")
    ap.add_argument("--smoke", action="store_true", help="2 steps of a tiny setting; prints, writes no result")
    ap.add_argument("--collect", action="store_true", help="only rebuild the report from an existing run")
    args = ap.parse_args()
    if args.smoke:
        args.steps, args.eval_limit = 2, 2
    out = Path(args.out or ROOT / "runs" / ("off_policy_smoke" if args.smoke else "off_policy"))
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
        "pipeline=" + json.dumps(pipeline(args.steps, args.eval_limit, args.smoke)),
    ]
    env = dict(os.environ)
    if args.threads:
        env.update(OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    t0 = time.perf_counter()
    if not args.collect:
        subprocess.run(cmd, check=True, env=env)
    wall = time.perf_counter() - t0
    import torch

    summary = json.loads((out / "summary.json").read_text())
    stages = {s["name"]: s for s in summary["stages"]}
    res = {
        "meta": {
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} CPUs",
            "torch_threads": args.threads or torch.get_num_threads(),
            "load_avg": list(os.getloadavg()),
            "wall_s": round(wall, 1),
            "command": " ".join(cmd[:-1]) + " pipeline=<world, world_index, coldstart, rl_<arm> + eval_<arm> each>",
            "cold_start_seconds": stages["coldstart"]["seconds"],
            "smoke": args.smoke,
        },
        "runs": {arm: arm_result(out, stages, arm) for arm in ARMS},
    }
    text = report(res, args)
    if args.smoke:  # a smoke run's numbers say nothing: printed, never written as a result
        print(json.dumps(res, indent=1))
    else:
        name = f"off_policy_threads{args.threads}" if args.threads else "off_policy"
        write_portable(RESULTS / f"{name}.json", json.dumps(res, indent=1))
        write_portable(RESULTS / f"{name}.md", text)
    print(text)


if __name__ == "__main__":
    main()
