"""Answering one (dataset, method) pair of an evaluation, resumable.

With a resume key, each answered batch's rows are appended to ``predictions/<pair>.jsonl.partial`` as the batch
finishes (after a first line holding the key). A rerun whose key is the same keeps those rows and answers only the
questions they lack; another key starts the pair afresh. ``searchrl eval`` keys on the whole resolved config, a
local policy directory's files, the indexes' manifests and each pair's questions (ids, texts and golds). The partial
files stay until the whole evaluation has finished, so a run cut short in its fifth pair keeps the four it finished;
a line cut by the interruption is answered again.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from rich.progress import Progress, TaskID

from searchrl.config import RunConfig
from searchrl.config.extensions import code_digests
from searchrl.data.records import QAExample
from searchrl.eval.method import Method, Prediction
from searchrl.utils import atomic_write_lines, console

Row = dict[str, Any]


def settings_key(cfg: RunConfig) -> str:
    """The whole resolved config, the digests of its plugins' files and, for a policy in a local directory, its files'
    sizes and times, and the same of every index's manifest: answers of a model trained again into the same
    directory, or retrieved from an index rebuilt in place, are not taken for the new one's."""
    policy = Path(cfg.training.init_from or cfg.model.policy)
    files = sorted(f for f in policy.iterdir() if f.is_file()) if policy.is_dir() else []
    indexes = [cfg.retrieval.index, *(d.index for d in cfg.evaluation.datasets if not isinstance(d, str))]
    files += [m for d in indexes if d and (m := Path(d) / "manifest.json").is_file()]
    stamp = [(str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files]
    # a plugin's method or protocol edited since: its answers are not the new one's
    code = [json.dumps(code_digests(cfg.plugins), sort_keys=True)] if cfg.plugins else []
    return _digest(cfg.model_dump_json(), json.dumps(stamp), *code)


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def partial_path(path: Path) -> Path:
    return path.with_name(path.name + ".partial")


def _slots(examples: Sequence[QAExample]) -> list[str]:
    """One name per example, unique even where a file repeats a question under its id: the id and its occurrence."""
    seen: Counter[str] = Counter()
    out = []
    for ex in examples:
        out.append(f"{ex.id}#{seen[ex.id]}")
        seen[ex.id] += 1
    return out


def _kept(partial: Path, key: str) -> dict[str, Row]:
    """The rows by slot that an interrupted run with the same key wrote, the file rewritten without the line the
    interruption cut (and anything after it)."""
    if not partial.exists():
        return {}
    lines = partial.read_bytes().split(b"\n")
    header = {"resume_key": key}
    if _load(lines[0]) != header:
        return {}
    rows: dict[str, Row] = {}
    for line in lines[1:]:
        entry = _load(line)
        if not (isinstance(entry, dict) and isinstance(entry.get("slot"), str) and isinstance(entry.get("row"), dict)):
            break
        rows[entry["slot"]] = entry["row"]
    _write(partial, header, rows.items(), "w")
    return rows


def _load(line: bytes) -> Any:
    try:
        return json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):  # a line cut mid-character or mid-object
        return None


def _write(partial: Path, header: Row | None, entries: Iterable[tuple[str, Row]], mode: str) -> None:
    lines = [json.dumps(header) + "\n"] if header else []
    lines += [json.dumps({"slot": s, "row": r}, ensure_ascii=False) + "\n" for s, r in entries]
    if mode == "w":
        atomic_write_lines(partial, lines)
    else:
        with partial.open("a", encoding="utf-8", errors="backslashreplace") as f:
            f.writelines(lines)


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
    prediction. With ``key`` (plus a digest of the pair's questions), resumable as the module says; ``path`` is the
    pair's predictions file."""
    slots, partial = _slots(examples), partial_path(path)
    if key:
        key = _digest(key, *(json.dumps([ex.id, ex.question, list(ex.answers)]) for ex in examples))
    kept = _kept(partial, key) if key else {}
    kept = {s: kept[s] for s in slots if s in kept}
    if kept:
        console.log(f"{path.stem}: {len(kept)} of {len(examples)} answers kept from an interrupted run")
    elif key:
        partial.parent.mkdir(parents=True, exist_ok=True)
        _write(partial, {"resume_key": key}, [], "w")
    if bar is not None and task is not None:
        bar.advance(task, len(kept))
    todo = [(s, ex) for s, ex in zip(slots, examples, strict=True) if s not in kept]
    for start in range(0, len(todo), batch_size):
        batch = todo[start : start + batch_size]
        preds = method.answer([ex for _, ex in batch])
        if len(preds) != len(batch):
            raise RuntimeError(f"method {method.name} returned {len(preds)} predictions for {len(batch)} questions")
        rows = [(s, to_row(ex, p)) for (s, ex), p in zip(batch, preds, strict=True)]
        kept.update(rows)
        if key:
            _write(partial, None, rows, "a")
        if bar is not None and task is not None:
            bar.advance(task, len(batch))
    return [kept[s] for s in slots]


def finish(paths: Iterable[Path]) -> None:
    """The whole evaluation is written: the pairs' partial files go."""
    for path in paths:
        partial_path(path).unlink(missing_ok=True)
