"""Exact match split by question form: which scores a guess could reach, and which need the documents.

A choice question ("..., A or B?") is answered right half the time by naming either option, and a yes/no question
by the majority answer, without reading anything; an open question (any other) is not. On 2wiki-mini's held-out
questions half are of the first two forms, so one EM mixes a guessing floor with the skill a search agent is for.
This script reads evaluation predictions files (``OUT/<eval stage>/predictions/<dataset>__<method>.jsonl``) and
reports EM per form, and which option the answers to choice questions name (an answer that names the second
option every time scores that position's share of golds: a prior, not reading):

    python benchmarks/em_by_question_form.py --name em_by_form r1=runs/x/eval_r1/predictions/heldout__agent.jsonl ...

Forms: ``searchrl.eval.diagnostics.question_form``: ``choice`` when the question names its options ("..., A or
B?"), ``yes/no`` when a gold answer is "yes" or "no", ``open`` otherwise. Writes
``benchmarks/results/<name>.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from searchrl.rewards.forms import QUESTION_FORMS, option_index, question_form
from searchrl.rewards.metrics import exact_match
from searchrl.utils import write_portable

RESULTS = Path(__file__).parent / "results"
FORMS = QUESTION_FORMS


def named_option(question: str, text: str | None) -> str:
    """Which option of a choice question ``text`` names: ``first``, ``second``, else ``other`` (neither, or both)."""
    i = option_index(question, text)
    return "other" if i is None else ("first", "second")[i]


def split_em(path: Path) -> dict:
    """Per form: questions, exact matches and EM; for choice questions also ``answered`` and ``gold``: how many name
    the first option, the second, or neither."""
    rows = [json.loads(line) for line in path.open() if line.strip()]
    out: dict = {}
    for r in rows:
        form = question_form(r["question"], r["golds"])
        f = out.setdefault(form, {"n": 0, "correct": 0})
        f["n"] += 1
        f["correct"] += int(exact_match(r.get("prediction") or "", r["golds"]))
        if form == "choice":
            for key, text in (("answered", r.get("prediction")), ("gold", r["golds"][0] if r["golds"] else None)):
                side = f.setdefault(key, {"first": 0, "second": 0, "other": 0})
                side[named_option(r["question"], text)] += 1
    for f in out.values():
        f["em"] = round(f["correct"] / f["n"], 3)
    return {"n": len(rows), "em": round(sum(f["correct"] for f in out.values()) / max(len(rows), 1), 3), **out}


def write_report(name: str, results: dict, lines: list[str]) -> None:
    """Print the report's lines and write them and ``results`` to ``benchmarks/results/<name>.{md,json}``."""
    text = "\n".join(lines) + "\n"
    print(text)
    write_portable(RESULTS / f"{name}.json", json.dumps(results, indent=1) + "\n")
    write_portable(RESULTS / f"{name}.md", text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--name", default="em_by_question_form")
    ap.add_argument("runs", nargs="+", help="LABEL=PREDICTIONS.jsonl")
    args = ap.parse_args()
    results = {}
    for item in args.runs:
        label, _, path = item.partition("=")
        if not path:
            raise SystemExit(f"{item!r}: give LABEL=PREDICTIONS.jsonl")
        if label in results:
            raise SystemExit(f"label {label!r} given twice: give each predictions file its own label")
        results[label] = {"file": path, **split_em(Path(path))}
    lines = [
        "# Exact match by question form",
        "",
        f"{time.strftime('%Y-%m-%d', time.gmtime())}. `python benchmarks/em_by_question_form.py` on evaluation "
        'predictions files: a choice question ("..., A or B?") and a yes/no question can be answered right by a '
        "guess; an open question cannot.",
        "",
        "| method | n | EM | " + " | ".join(f"{f}: right / n (EM)" for f in FORMS) + " | choice answers naming "
        "the first / second / neither option (golds) |",
        "|---|---|---|" + "---|" * len(FORMS) + "---|",
    ]
    for label, r in results.items():
        cells = [f"{r[f]['correct']} / {r[f]['n']} ({r[f]['em']:.2f})" if f in r else "-" for f in FORMS]
        sides = [r.get("choice", {}).get(k) for k in ("answered", "gold")]
        said, gold = ("-" if s is None else "{first} / {second} / {other}".format(**s) for s in sides)
        named = "-" if said == "-" else f"{said} ({gold})"
        lines.append(f"| {label} | {r['n']} | {r['em']:.2f} | " + " | ".join(cells) + f" | {named} |")
    write_report(args.name, results, lines)


if __name__ == "__main__":
    main()
