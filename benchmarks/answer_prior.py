"""The answer prior of a QA file: what training answers alone score on its held-out questions, with no model.

    python benchmarks/answer_prior.py 2wiki-mini=../shared/data/2wiki-mini/dev.jsonl:100 \\
        r1-searcher-stage2=../shared/data/r1-searcher-train/stage_2.jsonl

Each ``LABEL=QA.jsonl[:N]`` is split as ``searchrl run`` splits a user's QA file (``searchrl.data.splits``: the
``N`` questions with the smallest id hashes held out; without ``N``, half of them), the prior
(``searchrl.eval.prior``, the ``prior`` evaluation method) is fitted on the training part and scored by exact match
on the held-out part, per question form (``searchrl.rewards.forms``). Also counts which option position holds the
gold of the choice questions on each side. Writes ``benchmarks/results/<--name>.{json,md}``.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

from em_by_question_form import FORMS, named_option, write_report

from searchrl.data.loaders import load_qa
from searchrl.data.splits import heldout_split
from searchrl.eval.prior import AnswerPrior
from searchrl.rewards.forms import choice_options, question_form
from searchrl.rewards.metrics import exact_match


def gold_positions(examples) -> dict[str, int]:
    """Choice questions by the option that holds the gold: ``first``, ``second``, ``other`` (neither, or both)."""
    return dict(Counter(named_option(e.question, e.answers[0]) for e in examples if choice_options(e.question)))


def measure(path: str, n_heldout: int | None) -> dict:
    examples = load_qa(path)
    train, held = heldout_split(examples, len(examples) // 2 if n_heldout is None else n_heldout)
    prior = AnswerPrior.fit(train)
    forms: dict = {}
    for e in held:
        f = forms.setdefault(question_form(e.question, e.answers), {"n": 0, "correct": 0})
        f["n"] += 1
        f["correct"] += int(exact_match(prior.answer(e.question) or "", e.answers))
    for f in forms.values():
        f["em"] = round(f["correct"] / f["n"], 3)
    right = sum(f["correct"] for f in forms.values())
    return {
        "file": path,
        "train": len(train),
        "heldout": len(held),
        "em": round(right / max(len(held), 1), 3),
        **forms,
        "gold_position_train": gold_positions(train),
        "gold_position_heldout": gold_positions(held),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--name", default="answer_prior")
    ap.add_argument("sets", nargs="+", help="LABEL=QA.jsonl[:N held out]")
    args = ap.parse_args()
    results = {}
    for item in args.sets:
        label, _, spec = item.partition("=")
        path, _, n = spec.partition(":")
        if not path or (n and not n.isdigit()):
            raise SystemExit(f"{item!r}: give LABEL=QA.jsonl or LABEL=QA.jsonl:N")
        results[label] = measure(path, int(n) if n else None)
    lines = [
        "# The answer prior: training answers alone, no model",
        "",
        f"{time.strftime('%Y-%m-%d', time.gmtime())}. `python benchmarks/answer_prior.py`: the `prior` evaluation "
        "method fitted on each file's training part and scored on its held-out part (split by id hash, as "
        "`searchrl run` splits a QA file).",
        "",
        "| set | train / held out | EM | " + " | ".join(f"{f}: right / n" for f in FORMS) + " | choice gold first / "
        "second (train; held out) |",
        "|---|---|---|" + "---|" * len(FORMS) + "---|",
    ]
    for label, r in results.items():
        cells = [f"{r[f]['correct']} / {r[f]['n']}" if f in r else "-" for f in FORMS]
        sides = (r["gold_position_train"], r["gold_position_heldout"])
        pos = "; ".join(f"{p.get('first', 0)} / {p.get('second', 0)}" for p in sides)
        head = f"| {label} | {r['train']} / {r['heldout']} | {r['em']:.3f} | "
        lines.append(head + " | ".join(cells) + f" | {pos} |")
    write_report(args.name, results, lines)


if __name__ == "__main__":
    main()
