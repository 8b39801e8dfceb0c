"""``searchrl eval rescore``: re-score an existing predictions file with the same rule as ``searchrl eval``.

Ours (``question``, ``golds``, ``prediction``) or R1-Searcher's released format (``question``, ``answer``,
``pred_ans``); the latter is scored the authors' way by default.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from searchrl.eval.diagnostics import add_diagnostics
from searchrl.eval.harness import apply_judge, check_metrics, metric_functions, metric_settings
from searchrl.rewards.judge import LLMJudge
from searchrl.rewards.metrics import MetricFn
from searchrl.utils import read_jsonl


def _read_rows(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """JSONL lines, or one JSON array of objects (some released prediction files are plain JSON)."""
    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: not valid JSON ({err.msg}); fix the file") from None
        if not all(isinstance(r, dict) for r in data):
            raise ValueError(f"{path}: a JSON array of prediction objects was expected")
        return list(enumerate(data, 1))
    return list(read_jsonl(path))


def _golds(value: Any, where: str) -> list[str]:
    """Gold answers as strings; booleans become yes/no (as R1-Searcher's evaluation maps them)."""
    values = value if isinstance(value, list) else [value]
    out = []
    for v in values:
        if isinstance(v, bool):
            out.append("yes" if v else "no")
        elif v is not None:
            out.append(str(v))
    if not out:
        raise ValueError(f"{where}: no gold answer; every row needs a non-empty 'golds' or 'answer'")
    return out


def rescore_file(
    path: str | Path,
    metrics: Sequence[str] = ("em", "f1", "cover_em", "cover_em_tokens"),
    judge: LLMJudge | None = None,
    *,
    normalize: str = "auto",
    boundary: str = "auto",
    protocol: str | None = None,
) -> list[dict[str, Any]]:
    """Per-item rows of a predictions file, re-scored with ``metrics`` (and the judge, when given).

    Accepted rows: ours (``question``, ``golds``, ``prediction``; ``dataset``/``method`` kept) or R1-Searcher's
    released format (``question``, ``answer``, ``pred_ans``). Rows without a dataset or method take them from the
    file name: ``<dataset>__<method>.jsonl``, or ``<stem>`` and ``prediction``.

    ``normalize`` / ``boundary`` / ``protocol`` as in :func:`metric_settings`. Under ``auto`` with no protocol, one
    rule decides each score, the same as ``searchrl eval``: a row of ours is scored with the settings it records
    (``metric_settings``, written by the evaluation, i.e. its protocol's convention); R1-Searcher's files the way
    their script does (``r1_searcher`` normalisation, substring cover); anything else with each metric's default.
    A ``protocol`` scores every row by that protocol's convention. Every row gets the settings it was scored with.
    """
    path = Path(path)
    if path.is_dir():  # an evaluation's output directory: its files are under predictions/
        found = sorted(path.glob("predictions/*.jsonl")) or sorted(path.glob("*.jsonl"))
        example = found[0] if found else path / "predictions" / "DATASET__METHOD.jsonl"
        raise FileNotFoundError(f"{path} is a directory; give its predictions files, e.g. {example}")
    if not path.is_file():
        raise FileNotFoundError(f"predictions file not found: {path}")
    metrics = check_metrics(metrics)
    stem_dataset, _, stem_method = path.stem.partition("__")
    fns: dict[bool, tuple[dict[str, dict[str, str]], dict[str, MetricFn]]] = {}
    for released in (False, True):
        settings = metric_settings(metrics, normalize, boundary, protocol or ("r1_searcher" if released else None))
        fns[released] = (settings, metric_functions(settings))
    use_recorded = normalize == "auto" and boundary == "auto" and protocol is None
    recorded: dict[str, tuple[dict[str, dict[str, str]], dict[str, MetricFn]]] = {}

    def row_rule(obj: dict[str, Any]) -> tuple[dict[str, dict[str, str]], dict[str, MetricFn]] | None:
        """The rule a row of ours was scored with, for the metrics it records (others: each metric's default)."""
        saved = obj.get("metric_settings")
        if not (use_recorded and isinstance(saved, dict)):
            return None
        key = json.dumps(saved, sort_keys=True)
        if key not in recorded:
            base = fns[False][0]
            merged = {m: dict(saved[m]) if isinstance(saved.get(m), dict) else base[m] for m in metrics}
            recorded[key] = (merged, metric_functions(merged))
        return recorded[key]

    items = []
    for line_no, obj in _read_rows(path):
        where = f"{path}:{line_no}"
        if "prediction" in obj and "golds" in obj:
            pred, golds, released = obj["prediction"], _golds(obj["golds"], where), False
        elif "pred_ans" in obj and "answer" in obj:
            pred, golds, released = obj["pred_ans"], _golds(obj["answer"], where), True
        else:
            raise ValueError(
                f"{where}: unknown row format (keys: {', '.join(sorted(obj)) or 'none'}); expected ours "
                "(question, golds, prediction) or R1-Searcher's (question, answer, pred_ans)"
            )
        pred = None if pred is None else str(pred)
        settings, scorers = (None if released else row_rule(obj)) or fns[released]
        items.append(
            {
                "id": str(obj.get("id", obj.get("idx", line_no))),
                "dataset": obj.get("dataset") or stem_dataset,
                "method": obj.get("method") or stem_method or "prediction",
                "question": str(obj.get("question", "")),
                "golds": golds,
                "prediction": pred,
                "searches": obj.get("searches"),
                "queries": obj.get("queries"),
                "gen_tokens": obj.get("gen_tokens"),
                "latency_s": obj.get("latency_s"),
                "metrics": {m: fn(pred, golds) for m, fn in scorers.items()},
                "metric_settings": settings,
                **({"trajectory": obj["trajectory"]} if "trajectory" in obj else {}),
                **({"well_formed": obj["well_formed"]} if "well_formed" in obj else {}),
            }
        )
        add_diagnostics(items[-1])
    if not items:
        raise ValueError(f"{path}: no predictions in the file")
    if judge is not None:
        apply_judge(items, judge)
    return items
