"""Work that survives an interruption: a JSON-lines file whose first line holds a key, then one ``{"slot", "row"}``
line per finished piece of work, appended as each finishes.

A rerun reads the rows back only when the key is the same (the same settings and inputs); a line the interruption
cut, and anything after it, is dropped and done again. The evaluation harness keeps each answered question this way
(``eval.resume``), the sampling pipelines each question's attempts (``sft.attempts``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from searchrl.utils import atomic_write_lines, json_plain

Row = dict[str, Any]


def digest(*parts: str) -> str:
    """A short stable digest of ``parts`` (a resume key)."""
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def _load(line: bytes) -> Any:
    try:
        return json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):  # a line cut mid-character or mid-object
        return None


def write(partial: Path, header: Row | None, entries: Iterable[tuple[str, Row]], mode: str) -> None:
    """``mode="w"``: (re)write ``partial`` atomically, ``header`` first; ``"a"``: append ``entries``."""
    lines = [json.dumps(header) + "\n"] if header else []
    lines += [json.dumps({"slot": s, "row": r}, ensure_ascii=False, default=json_plain) + "\n" for s, r in entries]
    if mode == "w":
        atomic_write_lines(partial, lines)
    else:
        with partial.open("a", encoding="utf-8", errors="backslashreplace") as f:
            f.writelines(lines)


def kept(partial: Path, key: str) -> dict[str, Row]:
    """The rows by slot that an interrupted run with the same ``key`` wrote; the line the interruption cut (and
    anything after it) is cut off the file in place, which is read line by line and not written again (a sampling
    stage's file holds every attempt's tokens). {} when there is no such file or its key is another."""
    if not partial.exists():
        return {}
    rows: dict[str, Row] = {}
    with partial.open("r+b") as f:
        if _load(f.readline()) != {"resume_key": key}:
            return {}
        good = f.tell()  # the end of the last whole line
        for line in f:
            entry = _load(line)
            if not (
                isinstance(entry, dict) and isinstance(entry.get("slot"), str) and isinstance(entry.get("row"), dict)
            ):
                break
            rows[entry["slot"]] = entry["row"]
            good += len(line)
        f.truncate(good)
        f.seek(good - 1)
        if f.read(1) != b"\n":  # a last row cut just before its newline: the next one starts a line of its own
            f.write(b"\n")
    return rows


def start(partial: Path, key: str) -> None:
    """A fresh file for ``key`` (whatever was there before is dropped)."""
    partial.parent.mkdir(parents=True, exist_ok=True)
    write(partial, {"resume_key": key}, [], "w")
