"""World-only cold starts scored on real held-out questions: which synthetic curriculum carries over?

Each arm is one ``searchrl run`` of a recipe's cold start on the synthetic world alone (no real question in
training), then naive RAG and the agent (same model, greedy, BM25 top-3) on the held-out part of a real QA file's
split (by default 2wiki-mini's ``dev.jsonl``, 100 held out: the questions multihop_cpu's agent is scored on):

    python benchmarks/world_coldstart_real.py --run runs/wc_open --recipe multihop_world data.world.relations=open
    python benchmarks/world_coldstart_real.py --collect runs/wc_fixed runs/wc_open ...

``--run`` runs the six stages (world, its index, the cold start, the split, the real corpus's index, the
evaluation) with any further ``key=value`` overrides; ``--collect`` reads finished run directories and writes
``benchmarks/results/world_coldstart_real.{json,md}``: per arm the recipe, the world's wording and relations, the cold
start's seconds, EM / F1 / cover-EM / well-formed / searches of the agent and naive RAG, the evaluation's failure
diagnostics, and how many first queries add a content word the question does not have (a relation the model
brought from the world instead of the question's own). Committed cover-EM (a hedged answer, one naming both options
of an "A or B?" question, counted wrong) and the hedged share are recomputed from the predictions files, so arms
evaluated before those figures existed get them too.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

from searchrl.eval.diagnostics import COMMITTED, FLAGS, add_diagnostics
from searchrl.utils import read_jsonl, write_portable

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DATA = ROOT.parent / "shared" / "data" / "2wiki-mini"
#: words a first query may add without bringing a relation in (function words and the question's own frame)
_FUNCTION = set("a an the of in on at to for by with and or is was were be been".split())
_FUNCTION |= set("who what when where which whose how did do does film song album book".split())


def pipeline(qa: Path, corpus: Path, heldout: int, limit: int) -> str:
    stages = [
        "{name: world, kind: data, op: synth}",
        '{name: world_index, kind: data, op: index, data: "${world}/corpus.jsonl"}',
        "{name: coldstart, kind: sft}",
        f"{{name: split, kind: data, op: split, data: {qa}, args: {{heldout: {heldout}}}}}",
        f"{{name: real_index, kind: data, op: index, data: {corpus}}}",
        '{name: coldstart_eval_real, kind: eval, init_from: "${coldstart}", data: ["${split}/heldout.jsonl"], '
        f"set: {{evaluation.methods: [naive_rag, agent], evaluation.limit: {limit}}}}}",
    ]
    return "pipeline=[" + ", ".join(stages) + "]"


def first_query_adds(predictions: Path) -> tuple[int, int, list[tuple[str, int]]]:
    """(questions whose first query adds a content word absent from the question, questions with a search,
    the most frequent added words)."""
    added: dict[str, int] = {}
    n = searched = 0
    for line in predictions.open():
        row = json.loads(line)
        m = re.search(r"<search>(.*?)</search>", row.get("raw") or "", re.S)
        if not m:
            continue
        searched += 1
        asked = set(re.findall(r"\w+", row["question"].lower()))
        extra = [w for w in re.findall(r"\w+", m.group(1).lower()) if w not in asked and w not in _FUNCTION]
        n += bool(extra)
        for w in extra:
            added[w] = added.get(w, 0) + 1
    return n, searched, sorted(added.items(), key=lambda kv: (-kv[1], kv[0]))[:6]


def committed(predictions: Path) -> dict[str, float]:
    """Committed cover-EM and the share of hedged answers among the choice questions, from a predictions file."""
    rows = [row for _, row in read_jsonl(predictions)]
    for row in rows:
        add_diagnostics(row)
    choice = [r for r in rows if r["diagnostics"]["hedged"] is not None]
    return {
        COMMITTED: round(sum(r["metrics"][COMMITTED] for r in rows) / len(rows), 3),
        "hedged": round(sum(r["diagnostics"]["hedged"] for r in choice) / len(choice), 3) if choice else 0.0,
        "choice_questions": len(choice),
    }


def collect_one(run: Path) -> dict:
    summary = json.loads((run / "summary.json").read_text())
    stages = {s["name"]: s for s in summary["stages"]}
    world = stages["world"]["result"]
    ev = json.loads((run / "coldstart_eval_real" / "summary.json").read_text())
    rows = {r["method"]: r for r in ev["rows"]}
    diag = {k.split(" / ")[-1]: v for k, v in ev["diagnostics"].items()}
    preds = run / "coldstart_eval_real" / "predictions"
    adds, searched, words = first_query_adds(preds / "heldout__agent.jsonl")
    keep = ("em", "f1", "cover_em", "well_formed", "searches", "gen_tokens")
    scored = {m: {k: round(rows[m][k], 3) for k in keep if k in rows[m]} for m in ("agent", "naive_rag")}
    for m in scored:
        scored[m] |= committed(preds / f"heldout__{m}.jsonl")
    return {
        "run": run.name,
        "recipe": summary["recipe"],
        "surface": world.get("surface", "fixed"),
        "relations": world.get("relations", "fixed"),
        "coldstart_s": stages["coldstart"]["seconds"],
        "eval_s": stages["coldstart_eval_real"]["seconds"],
        "agent": scored["agent"],
        "naive_rag": scored["naive_rag"],
        # a share is None where it has no questions to count (no choice question, no search with documents)
        "diagnostics": {m: {k: None if v is None else round(v, 2) for k, v in d.items()} for m, d in diag.items()},
        "first_query_adds_a_word": adds,
        "questions_with_a_search": searched,
        "added_words": words,
    }


def report(arms: list[dict]) -> str:
    lines = [
        "# World-only cold starts on real held-out questions",
        "",
        "Each arm: a recipe's cold start on the synthetic world alone, then the agent and naive RAG (same model,",
        "greedy, BM25 top-3) on the held-out questions of the real split",
        "(`python benchmarks/world_coldstart_real.py`).",
        "",
        "Cover-EM counts an answer that contains the gold; committed cover-EM counts a hedged answer (one naming",
        'both options of an "A or B?" question, e.g. a restated question) wrong; hedged: share of the choice',
        "questions answered so.",
        "",
        "| arm | recipe | relations | wording | cold start s | agent EM | F1 | cover-EM | committed | well-formed "
        "| searches/q | naive RAG EM | cover-EM | committed | hedged | first queries adding a word |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for a in arms:
        g, n = a["agent"], a["naive_rag"]
        name = f"{a['run']}: {a['label']}" if a.get("label") else a["run"]
        lines.append(
            f"| {name} | {a['recipe']} | {a['relations']} | {a['surface']} | {a['coldstart_s']:.0f} "
            f"| {g['em']:.2f} | {g['f1']:.3f} | {g['cover_em']:.2f} | {g[COMMITTED]:.2f} "
            f"| {g.get('well_formed', 0):.2f} "
            f"| {g['searches']:.2f} | {n['em']:.2f} | {n['cover_em']:.2f} | {n[COMMITTED]:.2f} | {n['hedged']:.0%} "
            f"| {a['first_query_adds_a_word']} of {a['questions_with_a_search']} |"
        )
    lines += [
        "",
        "Why the agent's answers were wrong (share of questions):",
        "",
        "| arm | gold in docs | reading fail | retrieval fail | made-up hop | no search | format fail | hedged "
        "| most added words |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    share = lambda v: "-" if v is None else f"{v:.0%}"  # noqa: E731
    for a in arms:
        d = a["diagnostics"]["agent"]
        words = ", ".join(f"{w} {c}" for w, c in a["added_words"])
        cells = [d.get(k) for k in FLAGS if k != "hedged"] + [a["agent"]["hedged"]]
        lines.append(f"| {a['run']} | " + " | ".join(map(share, cells)) + f" | {words} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, help="run one arm into this directory")
    ap.add_argument("--recipe", default="multihop_world")
    ap.add_argument("--collect", type=Path, nargs="+", help="finished arm directories to report")
    ap.add_argument("--label", action="append", default=[], help="RUN=TEXT: what sets that arm apart")
    ap.add_argument("--qa", type=Path, default=DATA / "dev.jsonl")
    ap.add_argument("--corpus", type=Path, default=None, help="default: corpus.jsonl beside --qa")
    ap.add_argument("--heldout", type=int, default=100)
    ap.add_argument("--limit", type=int, default=100)
    args, overrides = ap.parse_known_args()
    if args.run:
        corpus = args.corpus or args.qa.parent / "corpus.jsonl"
        cmd = [sys.executable, "-m", "searchrl", "run", "--recipe", args.recipe, "--out", str(args.run)]
        cmd += [*overrides, pipeline(args.qa, corpus, args.heldout, args.limit)]
        print(" ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
    if args.collect:
        labels = dict(kv.split("=", 1) for kv in args.label)
        arms = [collect_one(r) | {"label": labels.get(r.name, "")} for r in args.collect]
        out = {
            "date": time.strftime("%Y-%m-%d", time.gmtime()),
            "machine": f"{platform.machine()}, {len(__import__('os').sched_getaffinity(0))} cores",
            "arms": arms,
        }
        write_portable(RESULTS / "world_coldstart_real.json", json.dumps(out, indent=2) + "\n")
        write_portable(RESULTS / "world_coldstart_real.md", report(arms))
        print(report(arms))


if __name__ == "__main__":
    main()
