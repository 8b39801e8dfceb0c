"""Arms of the `multihop_cpu` pipeline side by side: what changes held-out scores after RL?

Each arm is one ``searchrl run --recipe multihop_cpu ... --out DIR [overrides]``. Arms meant to be compared share
their cold start (copy its stage directories, with their ``DONE`` markers, into the new run directory so that only the
RL stage and the evaluation run again). This script only reads finished run directories:

    python benchmarks/multihop_arms.py --name answer_recall runs/arm_a="recipe reward" runs/arm_b="+ answer_recall"

and writes ``benchmarks/results/<name>.{json,md}``: per arm its reward components, RL steps and stage seconds, the
RL curve's mean answer reward over its first and last five steps, and the final greedy evaluation on the held-out
questions (``OUT/eval``) of the agent and naive RAG on the same trained model: EM, F1, cover-EM, committed cover-EM
(a hedged answer to an "A or B?" question counted wrong), well-formed rate, searches, and why answers were wrong.
Nothing here is typed in by hand.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import yaml

from searchrl.eval.diagnostics import FLAGS, LABELS
from searchrl.utils import write_portable

RESULTS = Path(__file__).parent / "results"
SCORES = ("em", "f1", "cover_em", "cover_em_committed", "well_formed", "searches", "gen_tokens")


def _seconds(run: Path, stage: str) -> float | None:
    done = run / stage / "DONE"
    return round(json.loads(done.read_text() or "{}").get("seconds", 0.0), 1) if done.exists() else None


def collect_arm(run: Path, label: str) -> dict:
    """One arm's figures from its run directory (``rl/`` and ``eval/`` must have finished)."""
    cfg = yaml.safe_load((run / "rl" / "config.yaml").read_text())
    steps = [json.loads(line) for line in (run / "rl" / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [s for s in steps if "reward/total" in s]

    def mean(key: str, part: list[dict]) -> float | None:
        values = [s[key] for s in part if key in s]
        return round(sum(values) / len(values), 3) if values else None

    ev = json.loads((run / "eval" / "summary.json").read_text())
    rows = {r["method"]: r for r in ev["rows"]}
    shares = {k.split(" / ")[-1]: v for k, v in ev.get("diagnostics", {}).items()}
    return {
        "run": run.name,
        "label": label,
        "reward": [c["name"] for c in cfg["reward"]["components"]],
        "rl_steps": len(steps),
        "stage_seconds": {s: _seconds(run, s) for s in ("coldstart", "rl", "eval")},
        "answer_reward_first5": mean("reward/answer", steps[:5]),
        "answer_reward_last5": mean("reward/answer", steps[-5:]),
        "methods": {
            m: {k: round(r[k], 3) for k in SCORES if r.get(k) is not None} for m, r in rows.items() if m in shares
        },
        "diagnostics": {m: {k: None if v is None else round(v, 3) for k, v in d.items()} for m, d in shares.items()},
    }


def report(arms: list[dict], name: str) -> str:
    fmt = lambda v, p=2: "-" if v is None else f"{v:.{p}f}"  # noqa: E731
    lines = [
        f"# multihop_cpu arms: {name}",
        "",
        "Greedy, BM25 top-3, the held-out questions of the run's split; naive RAG runs on the same trained model.",
        'Committed cover-EM counts a hedged answer (naming both options of an "A or B?" question) wrong.',
        "",
        "| arm | reward | RL steps | RL s | answer reward, first / last 5 steps | method | EM | F1 | cover-EM "
        "| committed | well-formed | searches/q |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for a in arms:
        for m, r in a["methods"].items():
            lines.append(
                f"| {a['run']}: {a['label']} | {' + '.join(a['reward'])} | {a['rl_steps']} "
                f"| {fmt(a['stage_seconds']['rl'], 0)} "
                f"| {fmt(a['answer_reward_first5'], 3)} / {fmt(a['answer_reward_last5'], 3)} | {m} "
                f"| {fmt(r.get('em'))} | {fmt(r.get('f1'), 3)} | {fmt(r.get('cover_em'))} "
                f"| {fmt(r.get('cover_em_committed'))} | {fmt(r.get('well_formed'))} | {fmt(r.get('searches'))} |"
            )
    lines += ["", "Why answers were wrong (share of questions; hedged: of the choice questions):", ""]
    lines += ["| arm | method | " + " | ".join(LABELS[f] for f in FLAGS) + " |", "|---|---|" + "---|" * len(FLAGS)]
    for a in arms:
        for m, d in a["diagnostics"].items():
            cells = ["-" if d.get(f) is None else f"{100 * d[f]:.0f}%" for f in FLAGS]
            lines.append(f"| {a['run']} | {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("arms", nargs="+", help="RUN_DIR=LABEL, one per arm")
    ap.add_argument("--name", required=True, help="results file stem, e.g. multihop_answer_recall")
    ap.add_argument("--note", default="", help="a line under the tables (the machine, what ran beside)")
    args = ap.parse_args()
    arms = []
    for spec in args.arms:
        run, _, label = spec.partition("=")
        arms.append(collect_arm(Path(run), label))
    out = {
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "machine": f"{platform.machine()}, {len(__import__('os').sched_getaffinity(0))} cores",
        "note": args.note,
        "arms": arms,
    }
    text = report(arms, args.name) + (f"\n{args.note}\n" if args.note else "")
    write_portable(RESULTS / f"{args.name}.json", json.dumps(out, indent=2) + "\n")
    write_portable(RESULTS / f"{args.name}.md", text)
    print(text)


if __name__ == "__main__":
    main()
