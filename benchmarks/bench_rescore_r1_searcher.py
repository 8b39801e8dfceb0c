"""Rescoring R1-Searcher's released predictions reproduces the numbers printed in its paper (issue 14).

The release (github.com/RUCAIBox/R1-Searcher, ``data/eval_results/``) holds five prediction files that are not Git
LFS pointers: HotpotQA and Bamboogle for both models, 2Wiki for Qwen (the Llama 2Wiki and both MuSiQue files are
stored in LFS). Each is rescored with ``searchrl.eval.rescore.rescore_file``, the function behind
``searchrl eval rescore``, under its default (R1-Searcher's files are scored the authors' way) and under SQuAD
normalisation for contrast, and compared with the paper: Table 2's ACC_R (cover exact match) and Table 4's EM /
CEM / F1, all printed with one decimal (Table 2 as fractions with three).

    python benchmarks/bench_rescore_r1_searcher.py [--dir DIR]

``DIR`` holds the five ``*.jsonl`` files (default ``runs/r1_searcher_release``); missing files are downloaded from
raw.githubusercontent.com first (60 s timeout each). Writes benchmarks/results/rescore_r1_searcher.{json,md} and
exits 1 when any printed digit differs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

from searchrl.eval.report import aggregate
from searchrl.eval.rescore import rescore_file
from searchrl.utils import write_portable

RESULTS = Path(__file__).parent / "results"
RAW = "https://raw.githubusercontent.com/RUCAIBox/R1-Searcher/main/data/eval_results/{name}.jsonl"
METRICS = ["em", "cover_em_tokens", "f1"]
#: The paper's numbers (spec 001 §7): Table 2 ACC_R (= CEM) and Table 4 EM / CEM / F1, in percent.
PUBLISHED = {
    "hotpotqa_qwen": {"acc_r": 65.4, "em": 58.0, "cover_em_tokens": 65.4, "f1": 71.9},
    "2wiki_qwen": {"acc_r": 63.6, "em": 55.4, "cover_em_tokens": 63.6, "f1": 63.7},
    "bamboogle_qwen": {"acc_r": 52.8, "em": 45.6, "cover_em_tokens": 52.8, "f1": 57.7},
    "hotpotqa_llama": {"acc_r": 64.8, "em": 58.4, "cover_em_tokens": 64.8, "f1": 70.6},
    "bamboogle_llama": {"acc_r": 50.4, "em": 44.0, "cover_em_tokens": 50.4, "f1": 57.1},
}
LABEL = {"em": "EM", "cover_em_tokens": "CEM", "f1": "F1"}


def fetch(directory: Path, name: str) -> Path:
    path = directory / f"{name}.jsonl"
    if path.exists():
        return path
    import httpx

    directory.mkdir(parents=True, exist_ok=True)
    url = RAW.format(name=name)
    print(f"downloading {url}", flush=True)
    try:
        resp = httpx.get(url, timeout=60.0, follow_redirects=True)
        resp.raise_for_status()
    except httpx.HTTPError as err:
        fix = f"copy data/eval_results/{name}.jsonl from a checkout of RUCAIBox/R1-Searcher into {directory}"
        raise SystemExit(f"cannot download {url} ({type(err).__name__}: {err}); {fix} (or pass --dir)") from None
    path.write_bytes(resp.content)
    return path


def score(path: Path, normalize: str) -> dict[str, float]:
    (row,) = aggregate(rescore_file(path, METRICS, normalize=normalize), METRICS)
    return {"n": row["n"], **{m: round(100 * row[m], 4) for m in METRICS}}


def stripped_bool_variant(path: Path, tmp: Path) -> tuple[int, float]:
    """(rows whose prediction is True/False only after stripping, ACC_R if those were mapped to yes/no too): what
    mapping True/False after stripping, as we did before, changes."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    changed = 0
    for r in rows:
        pred = r.get("pred_ans")
        if isinstance(pred, str) and pred != pred.strip() and pred.strip() in ("True", "False"):
            r["pred_ans"], changed = pred.strip(), changed + 1
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return changed, score(tmp, "auto")["cover_em_tokens"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, default=Path("runs/r1_searcher_release"), help="the release's eval_results")
    args = ap.parse_args()
    t0 = time.perf_counter()
    files: dict[str, dict] = {}
    all_match = True
    for name, published in PUBLISHED.items():
        path = fetch(args.dir, name)
        ours = score(path, "auto")
        squad = score(path, "squad")
        with tempfile.TemporaryDirectory() as tmp:
            n_stripped, acc_r_stripped = stripped_bool_variant(path, Path(tmp) / f"{name}.jsonl")
        printed = {m: f"{ours[m]:.1f}" for m in METRICS}
        match = {m: printed[m] == f"{published[m]:.1f}" for m in METRICS}
        match["acc_r"] = f"{ours['cover_em_tokens'] / 100:.3f}" == f"{published['acc_r'] / 100:.3f}"
        all_match &= all(match.values())
        files[name] = {
            "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "n": ours["n"],
            "published": published,
            "ours": {m: ours[m] for m in METRICS},
            "ours_printed": printed,
            "squad_normalisation": {m: squad[m] for m in METRICS},
            "rows_true_false_only_after_strip": n_stripped,
            "acc_r_if_mapped_after_strip": acc_r_stripped,
            "match": match,
        }
    seconds = time.perf_counter() - t0
    payload = {"all_match": all_match, "runtime_s": round(seconds, 2), "files": files}
    RESULTS.mkdir(exist_ok=True)
    write_portable(RESULTS / "rescore_r1_searcher.json", json.dumps(payload, indent=2) + "\n")

    lines = [
        "# Rescoring R1-Searcher's released predictions",
        "",
        "`searchrl eval rescore` on the five prediction files of github.com/RUCAIBox/R1-Searcher "
        "(`data/eval_results/`; the other three are Git LFS pointers), against the paper: Table 2 ACC_R and "
        "Table 4 EM / CEM / F1. *ours* is the command's default, which scores R1-Searcher's files the authors' way "
        "(their normalisation: underscores and punctuation, typographic quotes included, become spaces; the exact "
        "strings True/False become yes/no). *SQuAD* rescores with SQuAD normalisation for every metric, for "
        "contrast.",
        "",
        f"Every published number (ACC_R of Table 2; EM, CEM, F1 of Table 4; {len(files)} files) reproduced to the "
        f"printed digit: **{all_match}** ({seconds:.1f} s).",
        "",
        "| file | n | ACC_R paper | ACC_R ours | "
        + " | ".join(f"{LABEL[m]} paper / ours / SQuAD" for m in METRICS)
        + " |",
        "|---|---:|---:|---:|" + "---:|" * len(METRICS),
    ]
    for name, f in files.items():
        cells = [
            name,
            str(f["n"]),
            f"{f['published']['acc_r'] / 100:.3f}",
            f"{f['ours']['cover_em_tokens'] / 100:.3f}",
        ]
        cells += [
            f"{f['published'][m]:.1f} / {f['ours_printed'][m]} / {f['squad_normalisation'][m]:.1f}" for m in METRICS
        ]
        lines.append("| " + " | ".join(cells) + " |")
    odd = {n: f for n, f in files.items() if f["rows_true_false_only_after_strip"]}
    lines += [
        "",
        "The True/False mapping looks at the prediction as given, as the authors' script does. Mapping it after "
        "stripping whitespace (our earlier rule) changes "
        + (
            ", ".join(
                f'`{n}` ({f["rows_true_false_only_after_strip"]} row(s) such as " False "): ACC_R '
                f"{f['acc_r_if_mapped_after_strip']:.1f} instead of {f['published']['acc_r']:.1f}"
                for n, f in odd.items()
            )
            or "nothing"
        )
        + ".",
    ]
    write_portable(RESULTS / "rescore_r1_searcher.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if all_match else 1


if __name__ == "__main__":
    sys.exit(main())
