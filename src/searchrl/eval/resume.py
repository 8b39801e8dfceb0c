"""Answering one (dataset, method) pair of an evaluation, resumable.

With a resume key, each answered batch's rows are appended to ``predictions/<pair>.partial.jsonl`` as the batch
finishes (after a first line holding the key). A rerun whose key is the same (``searchrl eval`` keys on the whole
resolved config) keeps those rows and answers only the questions they lack; another key starts the pair afresh. The
finished pair's predictions file replaces its partial file. A last line cut by the interruption is dropped.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.progress import Progress, TaskID

from searchrl.config import RunConfig
from searchrl.data.records import QAExample
from searchrl.eval.method import Method, Prediction
from searchrl.utils import atomic_write_lines, console

Row = dict[str, Any]


def settings_key(cfg: RunConfig) -> str:
    """The whole resolved config and, for a policy in a local directory, its files' sizes and times: answers of a
    model trained again into the same directory are not taken for the new one's."""
    policy = Path(cfg.training.init_from or cfg.model.policy)
    files = sorted(f for f in policy.iterdir() if f.is_file()) if policy.is_dir() else []
    stamp = [(f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files]
    return hashlib.sha256((cfg.model_dump_json() + json.dumps(stamp)).encode()).hexdigest()[:16]


def partial_path(path: Path) -> Path:
    return path.with_name(path.stem + ".partial.jsonl")


def _kept(partial: Path, key: str) -> list[Row]:
    """The rows an interrupted run with the same key wrote (its whole lines), rewritten without a cut last line."""
    if not partial.exists():
        return []
    lines = partial.read_text(encoding="utf-8").splitlines()
    try:
        same = bool(lines) and json.loads(lines[0]).get("resume_key") == key
    except (json.JSONDecodeError, AttributeError):
        same = False
    if not same:
        return []
    rows: list[Row] = []
    for line in lines[1:]:
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:  # the line the interruption cut: it and anything after it are answered again
            break
    atomic_write_lines(partial, [lines[0] + "\n", *(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)])
    return rows


def answer_pair(
    method: Method,
    examples: Sequence[QAExample],
    batch_size: int,
    to_row: Callable[[QAExample, Prediction], Row],
    path: Path,
    key: str | None = None,
    bar: Progress | None = None,
    task: TaskID | None = None,
) -> list[Row]:
    """Every example's row, in order: run ``method`` in batches (advancing ``task`` of ``bar``), ``to_row`` each
    prediction. With ``key``, resumable as the module says; ``path`` is the pair's predictions file."""
    partial = partial_path(path)
    kept = {r["id"]: r for r in _kept(partial, key)} if key else {}
    kept = {ex.id: kept[ex.id] for ex in examples if ex.id in kept}
    if kept:
        console.log(f"{path.stem}: {len(kept)} of {len(examples)} answers kept from an interrupted run")
    if key and not kept:
        partial.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(json.dumps({"resume_key": key}) + "\n", encoding="utf-8")
    if bar is not None and task is not None:
        bar.advance(task, len(kept))
    todo = [ex for ex in examples if ex.id not in kept]
    for start in range(0, len(todo), batch_size):
        batch = todo[start : start + batch_size]
        preds = method.answer(batch)
        if len(preds) != len(batch):
            raise RuntimeError(f"method {method.name} returned {len(preds)} predictions for {len(batch)} questions")
        rows = [to_row(ex, p) for ex, p in zip(batch, preds, strict=True)]
        kept.update((r["id"], r) for r in rows)
        if key:
            with partial.open("a", encoding="utf-8") as f:
                f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        if bar is not None and task is not None:
            bar.advance(task, len(batch))
    return [kept[ex.id] for ex in examples]


def finish_pair(path: Path) -> None:
    """The pair's predictions file is written: its partial file goes."""
    partial_path(path).unlink(missing_ok=True)
