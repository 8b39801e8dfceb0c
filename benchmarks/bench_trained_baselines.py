"""The search agent against trained baselines on real held-out questions, all in one table.

    python benchmarks/bench_trained_baselines.py --real ../shared/data/2wiki-mini [--out runs/trained_baselines]
    python benchmarks/bench_trained_baselines.py --real DIR --smoke     # minutes: checks that it runs, no result

One ``searchrl run --recipe multihop_cpu`` pipeline on a directory with a FlashRAG QA file (``--train``, default
dev.jsonl) and corpus.jsonl, split by a fixed content hash into training questions and ``--heldout`` held-out ones.
Every method trains on the same training questions with the same reward (answer F1 + format penalty), the same RL
steps and the same BM25 top-k, and is evaluated greedily on the same held-out questions:

- ``agent``: the recipe itself: a cold start on synthetic-world oracle trajectories (the only source of multi-step
  search demonstrations), then GRPO with search on the real training questions (protocol ``search_r1``);
- ``prior``: no model and no retrieval: the training questions' answer prior by question form (the choice position
  most often gold, the commoner yes/no answer, the commonest open answer; ``searchrl.eval.prior``), the floor every
  trained method must clear;
- ``naive_rag``: the agent's final model answering from the top-k documents of one search with the question, the
  answer-only prompt and the answer span read out of the reply (``evaluation.answer_span``);
- ``rag_sft``: SFT of the base model on (top-k documents retrieved with the question + question -> short answer)
  over the training questions (protocol ``rag``);
- ``rag_rl``: ``rag_sft``, then GRPO with the documents in the prompt, one turn (protocol ``rag``);
- ``r1``: SFT of the base model on (question -> short answer), then GRPO reasoning without search (protocol
  ``reason``), Search-R1's R1 baseline.

Compute: each baseline's SFT is one epoch over the training questions (their prompts and answers are short: a
``rag`` example is the prompt with its documents and a few answer tokens), comparable to the agent's cold start;
each RL stage runs the recipe's steps, questions and group size. Writes
``benchmarks/results/trained_baselines.{json,md}`` (EM, F1, cover-EM, searches and generated tokens per question,
the failure shares of the evaluation diagnostics, right answers per question form, and the stage times).
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

from em_by_question_form import FORMS, split_em

from searchrl.eval.diagnostics import FLAGS
from searchrl.utils import write_portable

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
BASE = "smollm2-135m-instruct"
#: method -> (protocol it is evaluated with, the eval stage that holds its row)
METHODS = {
    "prior": ("none", "eval"),
    "naive_rag": ("search_r1", "eval"),
    "agent": ("search_r1", "eval"),
    "rag_sft": ("rag", "eval_rag_sft"),
    "rag_rl": ("rag", "eval_rag_rl"),
    "r1": ("reason", "eval_r1"),
}
#: --smoke: tiny stages, only to check that the pipeline runs
SMOKE = {
    "sft.limit": 4,
    "training.steps": 1,
    "training.eval_every": 0,
    "rollout.max_new_tokens": 24,
    "rollout.max_turns": 2,
    "evaluation.limit": 4,
}


def pipeline(args: argparse.Namespace) -> list[dict]:
    smoke = SMOKE if args.smoke else {}
    sft_limit = smoke.get("sft.limit")
    real = {"data.source": "${cfg.data.source}", "data.dev": "${split}/heldout.jsonl"}
    rl_common = {**real, "training.eval_every": 0, **{k: v for k, v in smoke.items() if k != "sft.limit"}}
    baseline_sft = {"sft.data": "oracle", "data.train": "${split}/train.jsonl", "sft.limit": sft_limit,
                    "sft.kinds": [], "sft.oracle_first_turns": 0, "sft.oracle_plan": False,
                    "sft.oracle_mix": {}, "sft.oracle_topk": None}  # all training questions, eval's top-k  # fmt: skip
    ev = {"evaluation.methods": ["agent"]} | ({"evaluation.limit": smoke["evaluation.limit"]} if smoke else {})
    stages: list[dict] = [
        {"name": "world", "kind": "data", "op": "synth"},
        {"name": "world_index", "kind": "data", "op": "index", "data": "${world}/corpus.jsonl"},
        {"name": "coldstart", "kind": "sft",
         **({"set": {"sft.limit": sft_limit, "sft.oracle_mix": {}}} if smoke else {})},
        {"name": "split", "kind": "data", "op": "split", "data": "${cfg.data.source}/${cfg.data.train}",
         "args": {"heldout": args.heldout}},
        {"name": "index", "kind": "data", "op": "index", "data": "${cfg.data.source}/${cfg.data.corpus}"},
        {"name": "rl", "kind": "rl", "init_from": "${coldstart}", "data": "${split}/train.jsonl",
         "set": {**real, **{k: v for k, v in smoke.items() if k != "sft.limit"}}},
        {"name": "eval", "kind": "eval", "init_from": "${rl}", "data": ["${split}/heldout.jsonl"],
         "set": {"evaluation.methods": ["prior", "naive_rag", "agent"],
                 "evaluation.prior_data": "${split}/train.jsonl"} | ({"evaluation.limit": 4} if smoke else {})},
    ]  # fmt: skip
    for protocol, sft_name, rl_name in (("rag", "rag_sft", "rag_rl"), ("reason", "r1_sft", "r1")):
        proto = {"rollout.protocol": protocol, "rollout.max_turns": 1}
        stages.append({"name": sft_name, "kind": "sft", "init_from": BASE, "set": {**proto, **baseline_sft}})
        if sft_name == "rag_sft":
            stages.append(
                {"name": "eval_rag_sft", "kind": "eval", "init_from": "${rag_sft}",
                 "data": ["${split}/heldout.jsonl"], "set": {**proto, **ev}}
            )  # fmt: skip
        stages.append(
            {"name": rl_name, "kind": "rl", "init_from": f"${{{sft_name}}}", "data": "${split}/train.jsonl",
             "set": {**rl_common, **proto}}
        )  # fmt: skip
        stages.append(
            {"name": f"eval_{rl_name}", "kind": "eval", "init_from": f"${{{rl_name}}}",
             "data": ["${split}/heldout.jsonl"], "set": {**proto, **ev}}
        )  # fmt: skip
    if args.baselines_first:  # the agent's RL and evaluation after the baselines' stages
        agent = [s for s in stages if s["name"] in ("rl", "eval")]
        stages = [s for s in stages if s not in agent] + agent
    return stages


def collect(out: Path, stages: list[str]) -> dict:
    """The rows of every method whose evaluation has run in ``out`` (a run stopped part-way gives the rest later:
    the stages with a DONE marker are skipped when it is started again), and each stage's time."""
    rows = {}
    for method, (protocol, stage) in METHODS.items():
        path = out / stage / "summary.json"
        if not path.exists():
            continue
        ev = json.loads(path.read_text())
        wanted = method if method in ("naive_rag", "prior") else "agent"
        row = next((r for r in ev["rows"] if r["method"] == wanted), None)
        if row is None:
            continue
        shares = next((v for k, v in ev.get("diagnostics", {}).items() if k.endswith(f"/ {wanted}")), {})
        rows[method] = {
            "protocol": protocol,
            **{k: row.get(k) for k in ("n", "em", "f1", "cover_em", "cover_em_committed", "searches", "gen_tokens")},
            "failures": shares,
        }
        preds = out / stage / "predictions" / f"heldout__{wanted}.jsonl"
        if preds.exists():  # EM per question form: how much of it a guess between named options could reach
            rows[method]["forms"] = split_em(preds)
    seconds = {}
    for name in stages:  # a stage that ran in an earlier invocation: its DONE marker has its time
        done = out / name / "DONE"
        seconds[name] = round(json.loads(done.read_text()).get("seconds", 0.0), 1) if done.exists() else None
    return {"rows": rows, "stage_seconds": seconds}


def report(res: dict, args: argparse.Namespace) -> list[str]:
    rows = res["rows"]
    fmt = lambda v, p=3: "-" if v is None else f"{v:.{p}f}"  # noqa: E731
    lines = [
        "# The search agent against trained baselines, real held-out questions",
        "",
        f"{res['meta']['date']}, {res['meta']['machine']}. `python benchmarks/bench_trained_baselines.py "
        f"--real <dir> --heldout {args.heldout}`: one `searchrl run --recipe multihop_cpu` pipeline; every method "
        "trains on the same training questions with the same reward and RL steps and answers the same held-out "
        "questions greedily with BM25 top-3 (see the script's docstring for what each method is).",
        "",
        "| method | protocol | n | EM | F1 | cover-EM | cover-EM (committed) | searches/q | gen tokens/q |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for m, r in rows.items():
        lines.append(
            f"| `{m}` | {r['protocol']} | {r['n']} | {fmt(r['em'])} | {fmt(r['f1'])} | {fmt(r['cover_em'])} "
            f"| {fmt(r.get('cover_em_committed'))} | {fmt(r['searches'], 2)} | {fmt(r['gen_tokens'], 1)} |"
        )
    if "agent" in rows:
        best = max((r["em"] for m, r in rows.items() if m in ("rag_sft", "rag_rl", "r1")), default=None)
        if best is not None:
            lines += ["", f"Agent EM minus the best trained baseline's: {rows['agent']['em'] - best:+.3f}."]
        if "prior" in rows:
            diff = rows["agent"]["em"] - rows["prior"]["em"]
            lines.append(f"Agent EM minus the answer prior's (no model): {diff:+.3f}.")
        if "naive_rag" in rows:
            diff = rows["agent"]["cover_em"] - rows["naive_rag"]["cover_em"]
            lines.append(f"Agent cover-EM minus naive RAG's: {diff:+.3f}.")
            if None not in (rows["agent"].get("cover_em_committed"), rows["naive_rag"].get("cover_em_committed")):
                diff = rows["agent"]["cover_em_committed"] - rows["naive_rag"]["cover_em_committed"]
                what = 'Agent committed cover-EM (a hedged "A or B?" answer counted wrong) minus naive RAG\'s'
                lines.append(f"{what}: {diff:+.3f}.")
    flags = list(FLAGS)
    lines += ["", "Why answers are wrong (share of questions):", "", "| method | " + " | ".join(flags) + " |",
              "|---|" + "---|" * len(flags)]  # fmt: skip
    for m, r in rows.items():
        cells = ["-" if r["failures"].get(f) is None else f"{100 * r['failures'][f]:.0f}%" for f in flags]
        lines.append(f"| `{m}` | " + " | ".join(cells) + " |")
    if any("forms" in r for r in rows.values()):
        lines += ["", "Right answers by question form (a choice or yes/no question can be guessed, an open one "
                  "cannot; `benchmarks/em_by_question_form.py`):", "",
                  "| method | " + " | ".join(FORMS) + " |", "|---|" + "---|" * len(FORMS)]  # fmt: skip
        for m, r in rows.items():
            f = r.get("forms", {})
            cells = [f"{f[k]['correct']} / {f[k]['n']}" if k in f else "-" for k in FORMS]
            lines.append(f"| `{m}` | " + " | ".join(cells) + " |")
    times = ", ".join(f"{k} {v:.0f}" for k, v in res["stage_seconds"].items() if v is not None)
    lines += ["", f"Stage wall times (s): {times}."]
    missing = [m for m in METHODS if m not in rows]
    if missing:
        lines.append(
            f"Not evaluated yet in this run directory: {', '.join(f'`{m}`' for m in missing)} (the same command "
            "goes on from the stages that have not run)."
        )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--real", required=True, help="a directory with the QA file (--train) and corpus.jsonl")
    ap.add_argument("--train", default="dev.jsonl", help="the QA file in --real that is split (default dev.jsonl)")
    ap.add_argument("--heldout", type=int, default=100)
    ap.add_argument("--out", default=None, help="the run directory (default runs/trained_baselines)")
    ap.add_argument("--smoke", action="store_true", help="tiny stages; prints, writes no result")
    ap.add_argument("--collect", action="store_true", help="only rebuild the report from an existing run")
    ap.add_argument(
        "--baselines-first",
        action="store_true",
        help="run the baselines' stages before the agent's RL and evaluation (the order does not change a result)",
    )
    args = ap.parse_args()
    real = Path(args.real)
    if not (real / args.train).exists() or not (real / "corpus.jsonl").exists():
        raise SystemExit(f"--real {real}: needs {args.train} (a FlashRAG QA file) and corpus.jsonl in it")
    out = Path(args.out or ROOT / "runs" / ("trained_baselines_smoke" if args.smoke else "trained_baselines"))
    cmd = [sys.executable, "-m", "searchrl", "run", "--recipe", "multihop_cpu", "--out", str(out),
           f"data.source={real.resolve()}", f"data.train={args.train}",
           "pipeline=" + json.dumps(pipeline(args))]  # fmt: skip
    t0 = time.perf_counter()
    if not args.collect:
        subprocess.run(cmd, check=True)
    res = collect(out, [stage["name"] for stage in pipeline(args)])
    res["meta"] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} CPUs",
        "load_avg": list(os.getloadavg()),
        "wall_s": round(time.perf_counter() - t0, 1),
        "command": " ".join(cmd[:-3]) + " data.source=<dir> data.train=<file> pipeline=<see the script>",
    }
    lines = report(res, args)
    print("\n".join(lines))
    if not args.smoke:
        write_portable(RESULTS / "trained_baselines.json", json.dumps(res, indent=1))
        write_portable(RESULTS / "trained_baselines.md", "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
