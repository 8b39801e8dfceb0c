"""Does training work? The `multihop_cpu` pipeline on real multi-hop questions, reported (issue 16).

    python benchmarks/bench_multihop_cpu.py [--run] [--baseline] [--data ../shared/data/2wiki-mini]
                                            [--qa dev.jsonl] [--out runs/multihop_cpu]

With ``--run`` it first runs ``searchrl run --recipe multihop_cpu data.source=DATA data.train=QA --out OUT``
(stages already done are skipped). With ``--baseline`` it also evaluates the shipped model (naive RAG and the
untrained agent) on the same held-out questions and index into ``OUT/eval_shipped`` (skipped when there). It then
reads what the run measured (nothing here is typed in by hand):

- each stage's wall time (``OUT/<stage>/DONE``);
- the cold start on the synthetic world: agent EM per question kind on the world's dev questions (``coldstart_eval``);
- the RL curve: reward, held-out EM / F1, well-formed rate, searches, length and KL per step (``rl/metrics.jsonl``);
- the final greedy evaluation on the 100 held-out questions: naive RAG vs the trained agent (``eval``), the
  RL stage's starting checkpoint on the same questions (the trainer's step-0 held-out evaluation, when
  ``training.eval_every`` > 0; the recipe leaves it at 0 to save time, and the row reads "-") and, when
  ``OUT/eval_shipped`` exists, the shipped model's naive RAG and agent;

and writes ``benchmarks/results/multihop_cpu.{json,md}``, the curve PNG and a viewer page of the held-out
trajectories (before and after RL, or the final evaluation's without RL evaluations) into
``benchmarks/results/multihop_cpu/``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

from searchrl.utils import write_portable

RESULTS = Path(__file__).parent / "results"
CURVE_KEYS = ("reward/total", "rollout/well_formed", "rollout/searches", "rollout/response_len", "kl/mean")


def _rows(summary_path: Path) -> list[dict]:
    return json.loads(summary_path.read_text())["rows"] if summary_path.exists() else []


def _pick(rows: list[dict], method: str) -> dict:
    return next((r for r in rows if r["method"] == method and r["dataset"] != "average"), {})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", action="store_true", help="run (or resume) the pipeline first")
    ap.add_argument("--data", default="../shared/data/2wiki-mini")
    ap.add_argument("--qa", default="dev.jsonl")
    ap.add_argument("--out", default="runs/multihop_cpu")
    ap.add_argument("--baseline", action="store_true", help="evaluate the shipped model on the held-out questions")
    ap.add_argument("--results", default=str(RESULTS), help="where the report goes")
    ap.add_argument("--note", default="", help="a line printed under the stage times (the machine, what ran beside)")
    args = ap.parse_args()
    results = Path(args.results)
    out = Path(args.out)
    command = [
        "searchrl",
        "run",
        "--recipe",
        "multihop_cpu",
        f"data.source={args.data}",
        f"data.train={args.qa}",
        "--out",
        str(out),
    ]
    if args.run:
        subprocess.run([str(Path(sys.executable).parent / "searchrl"), *command[1:]], check=True)

    shipped_dir = out / "eval_shipped"
    if args.baseline and not (shipped_dir / "summary.json").exists():
        subprocess.run(
            [
                str(Path(sys.executable).parent / "searchrl"),
                "eval",
                "--config",
                "multihop_cpu",
                "--model",
                "smollm2-135m-instruct",
                "--methods",
                "naive_rag,agent",
                "--data",
                str(out / "split" / "heldout.jsonl"),
                "--index",
                str(out / "index" / "index"),
                "--limit",
                "100",
                "--out",
                str(shipped_dir),
            ],
            check=True,
        )
    shipped = _rows(shipped_dir / "summary.json")

    import yaml

    order = [st["name"] for st in yaml.safe_load((out / "config.yaml").read_text())["pipeline"]]
    metrics = [json.loads(line) for line in (out / "rl" / "metrics.jsonl").open()]
    stages, resumed = {}, []  # pipeline order; the seconds each stage took when it ran (reruns skip finished ones)
    for name in order:
        if (out / name / "DONE").exists():
            done = json.loads((out / name / "DONE").read_text())
            stages[name] = done["seconds"]
            if done.get("resumed") and name == "rl":  # DONE times the last process only: sum every step instead
                stages[name] = max(
                    done["seconds"], sum(m.get("time/step_s", 0) + m.get("time/eval_s", 0) for m in metrics)
                )
                resumed.append(name)
    steps = [m for m in metrics if "reward/total" in m]
    evals = [m for m in metrics if "eval/em" in m]
    final = _rows(out / "eval" / "summary.json")
    cold = json.loads((out / "coldstart_eval" / "summary.json").read_text())
    start, end = (evals[0], evals[-1]) if evals else ({}, {})  # training.eval_every=0: no held-out scores in RL
    result = {
        "command": " ".join(command),
        "out": str(out),
        "stage_seconds": stages,
        "resumed_stages": resumed,
        "note": args.note,
        "total_minutes": round(sum(stages.values()) / 60, 1),
        "coldstart_world_dev": {
            "all": {k: _pick(cold["rows"], "agent").get(k) for k in ("n", "em", "f1", "well_formed", "searches")},
            "by_kind": {
                r["kind"]: {k: r.get(k) for k in ("n", "em", "f1", "searches")} for r in cold.get("by_kind", [])
            },
        },
        "heldout": {
            "naive_rag": {k: _pick(final, "naive_rag").get(k) for k in ("n", "em", "f1", "searches")},
            "agent_after_rl": {k: _pick(final, "agent").get(k) for k in ("n", "em", "f1", "well_formed", "searches")},
            "agent_rl_start": {
                k: start.get(f"eval/{k}") for k in ("em", "f1", "well_formed", "searches_per_question")
            },
            "agent_rl_end": {k: end.get(f"eval/{k}") for k in ("em", "f1", "well_formed", "searches_per_question")},
            "shipped_naive_rag": {k: _pick(shipped, "naive_rag").get(k) for k in ("n", "em", "f1", "searches")},
            "shipped_agent": {k: _pick(shipped, "agent").get(k) for k in ("n", "em", "f1", "well_formed", "searches")},
        },
        "rl_curve": [{"step": m["step"], **{k: m.get(k) for k in CURVE_KEYS}} for m in steps],
        "heldout_curve": [{"step": m["step"], "em": m["eval/em"], "f1": m["eval/f1"]} for m in evals],
    }
    h = result["heldout"]

    def diff(a, b):
        return None if a is None or b is None else round(a - b, 3)

    result["checks"] = {
        "agent_minus_naive_rag_em": diff(h["agent_after_rl"].get("em"), h["naive_rag"].get("em")),
        "agent_minus_naive_rag_f1": diff(h["agent_after_rl"].get("f1"), h["naive_rag"].get("f1")),
        "agent_minus_shipped_naive_rag_em": diff(h["agent_after_rl"].get("em"), h["shipped_naive_rag"].get("em")),
        "agent_minus_shipped_naive_rag_f1": diff(h["agent_after_rl"].get("f1"), h["shipped_naive_rag"].get("f1")),
        "rl_gain_em": diff(h["agent_rl_end"]["em"], h["agent_rl_start"]["em"]),
        "rl_gain_f1": diff(h["agent_rl_end"]["f1"], h["agent_rl_start"]["f1"]),
    }

    art = results / "multihop_cpu"
    art.mkdir(parents=True, exist_ok=True)
    from searchrl.viz.plots import plot_run
    from searchrl.viz.viewer import write_viewer

    shutil.copy(plot_run(out / "rl"), art / "rl_curves.png")
    shutil.copy(plot_run(out / "coldstart"), art / "coldstart_curves.png")
    eval_files = sorted((out / "rl" / "evals").glob("step_*.jsonl"), key=lambda p: int(p.stem.split("_")[1]))
    pages = [eval_files[0], eval_files[-1]] if eval_files else sorted((out / "eval" / "predictions").glob("*agent*"))
    write_viewer(pages, art / "heldout_trajectories.html", title="multihop_cpu: held-out trajectories of the agent")
    write_portable(results / "multihop_cpu.json", json.dumps(result, indent=2) + "\n")
    write_portable(results / "multihop_cpu.md", render(result))
    print(render(result))


def _d(x) -> str:
    return "-" if x is None else f"{x:+.3f}"


def _f(x) -> str:
    return "-" if x is None else f"{x:.3f}"


def render(r: dict) -> str:
    h = r["heldout"]
    n = h["agent_after_rl"].get("n") or h["naive_rag"].get("n")  # the final evaluation's own count
    lines = [
        "# multihop_cpu: the bundled 135M model trained into a search agent on 2 CPU cores",
        "",
        f"Command: `{r['command']}` (then `python benchmarks/bench_multihop_cpu.py --baseline --out {r['out']}`). "
        "Same harness for every row:",
        f"greedy, BM25 top-3, the {n} held-out questions of the fixed split (`searchrl data split`).",
        "",
        f"| held-out ({n}) | EM | F1 | well-formed | searches/q |",
        "|---|---|---|---|---|",
    ]
    if h["shipped_naive_rag"].get("n"):
        sn, sa = h["shipped_naive_rag"], h["shipped_agent"]
        other = f" ({sn['n']} questions)" if sn["n"] != n else ""  # scored on another count than the rows below
        lines += [
            f"| shipped model, naive RAG{other} | {_f(sn['em'])} | {_f(sn['f1'])} | - | {_f(sn['searches'])} |",
            f"| shipped model, agent{other} | {_f(sa.get('em'))} | {_f(sa.get('f1'))} | {_f(sa.get('well_formed'))} | "
            f"{_f(sa.get('searches'))} |",
        ]
    lines += [
        f"| trained model, naive RAG | {_f(h['naive_rag']['em'])} | {_f(h['naive_rag']['f1'])} | - | "
        f"{_f(h['naive_rag']['searches'])} |",
        f"| agent, cold start (RL step 0) | {_f(h['agent_rl_start']['em'])} | {_f(h['agent_rl_start']['f1'])} | "
        f"{_f(h['agent_rl_start']['well_formed'])} | {_f(h['agent_rl_start']['searches_per_question'])} |",
        f"| agent, after RL | {_f(h['agent_after_rl']['em'])} | {_f(h['agent_after_rl']['f1'])} | "
        f"{_f(h['agent_after_rl']['well_formed'])} | {_f(h['agent_after_rl']['searches'])} |",
        "",
        f"Agent minus naive RAG (trained model): EM {_d(r['checks']['agent_minus_naive_rag_em'])}, "
        f"F1 {_d(r['checks']['agent_minus_naive_rag_f1'])}; minus naive RAG (shipped model): EM "
        f"{_d(r['checks']['agent_minus_shipped_naive_rag_em'])}, F1 "
        f"{_d(r['checks']['agent_minus_shipped_naive_rag_f1'])}. RL gain on the held-out questions (end minus start): "
        f"EM {_d(r['checks']['rl_gain_em'])}, F1 {_d(r['checks']['rl_gain_f1'])}.",
        "",
        f"Cold start on the synthetic world (agent, greedy, {r['coldstart_world_dev']['all']['n']} dev questions):",
        "",
        "| kind | n | EM | F1 | searches/q |",
        "|---|---|---|---|---|",
    ]
    c = r["coldstart_world_dev"]
    lines.append(
        f"| all | {c['all']['n']} | {_f(c['all']['em'])} | {_f(c['all']['f1'])} | {_f(c['all']['searches'])} |"
    )
    for kind, v in sorted(c["by_kind"].items()):
        lines.append(f"| {kind} | {v['n']} | {_f(v['em'])} | {_f(v['f1'])} | {_f(v['searches'])} |")
    lines += ["", "Stage wall times (2 cores):", "", "| stage | seconds |", "|---|---|"]
    resumed = r.get("resumed_stages", [])
    lines += [
        f"| {k}{' (resumed: its steps and evaluations summed)' if k in resumed else ''} | {v:.0f} |"
        for k, v in r["stage_seconds"].items()
    ]
    lines += [f"| **total** | {r['total_minutes']} min |", ""]
    lines += [r["note"], ""] if r.get("note") else []
    lines += [
        "Curves: [RL](multihop_cpu/rl_curves.png), [cold start](multihop_cpu/coldstart_curves.png); held-out "
        "trajectories (at the start and end of RL when it scored them, else after RL)",
        "in [multihop_cpu/heldout_trajectories.html](multihop_cpu/heldout_trajectories.html).",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
