"""User-facing text states checkable facts: no work-log references, no machine-specific paths in committed results."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import searchrl
from searchrl.utils import portable_text

ROOT = Path(searchrl.__file__).resolve().parents[2]
#: work-log talk, and the numbered paper specifications the developers work from, which users do not have
LOG_TALK = re.compile(r"session [0-9]+|issue [0-9]+|the brief|today's code|\bspecs? [0-9]{3}\b", re.I)


def _user_files() -> list[Path]:
    results = [p for p in (ROOT / "benchmarks" / "results").rglob("*") if p.suffix in (".md", ".json", ".html")]
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted(results)]


def test_no_work_log_references_or_local_absolute_paths() -> None:
    local = str(ROOT.parent) + "/"  # where this checkout sits: never part of a committed result
    bad = []
    for path in _user_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        if m := LOG_TALK.search(text):
            bad.append(f"{path.relative_to(ROOT)}: {m.group(0)!r}")
        if local != "/" and local in text:
            bad.append(f"{path.relative_to(ROOT)}: absolute path under {local}")
    assert not bad, "\n".join(bad[:20])


def test_recipe_descriptions_cite_papers_not_specifications() -> None:
    """A recipe's description is printed by `searchrl config show` and `config validate`."""
    from searchrl.config import load_config, recipe_names

    bad = [name for name in recipe_names() if LOG_TALK.search(load_config(name).description)]
    assert not bad, f"recipe descriptions with work-log or specification references: {bad}"


def test_license_is_apache_2_full_text() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text and "APPENDIX: How to apply the Apache License" in text


def test_portable_text_makes_paths_relative() -> None:
    text = f"{sys.executable} -m searchrl eval --data {ROOT}/data/x.jsonl --out {ROOT.parent}/runs/a {Path.home()}/c"
    out = portable_text(text)
    assert out.startswith("python -m searchrl eval --data data/x.jsonl")
    assert str(ROOT) not in out and "../runs/a" in out
    assert str(Path(sys.executable).parent) not in out
