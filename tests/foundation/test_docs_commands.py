"""Every `searchrl` command line the user docs show (docs/*.md and the README's inline ones; the README's blocks are
tests/foundation/test_readme_commands.py's) names a real subcommand and real options, and its dotted overrides of a
shipped recipe validate."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

import searchrl
from searchrl.cli import app
from searchrl.config import load_config, recipe_names

ROOT = Path(searchrl.__file__).resolve().parents[2]
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```", re.S | re.M)
OVERRIDE = re.compile(r"^[a-z_]+(\.[\w-]+)+=")


def _lines(text: str) -> list[str]:
    """`searchrl ...` lines of fenced blocks (continuations joined, comments dropped) and inline code spans."""
    out = []
    for m in FENCE.finditer(text):
        for line in m.group(2).replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+#\s.*$", "", line).strip()
            if " -m searchrl " in line:
                line = "searchrl " + line.split(" -m searchrl ", 1)[1]
            if line.startswith("searchrl "):
                out.append(line)
    out += [" ".join(m.group(1).split()) for m in re.finditer(r"`(searchrl [^`]+)`", FENCE.sub("", text))]
    return out


def doc_commands() -> list[tuple[str, str]]:
    docs = sorted((ROOT / "docs").glob("*.md"))
    cmds = {(p.name, c) for p in docs for c in _lines(p.read_text(encoding="utf-8"))}
    readme = FENCE.sub("", (ROOT / "README.md").read_text(encoding="utf-8"))
    cmds |= {("README.md", c) for c in _lines(readme)}
    return sorted(cmds)


def _help_page(words: list[str]) -> str | None:
    runner = CliRunner()
    for n in (3, 2, 1):
        if len(words) < n or any(w.startswith("-") for w in words[:n]):
            continue
        res = runner.invoke(app, [*words[:n], "--help"], env={"COLUMNS": "400"})
        if res.exit_code == 0 and "Usage" in res.output:
            return res.output
    return None


def test_the_docs_show_commands() -> None:
    assert len(doc_commands()) > 60
    assert {name for name, _ in doc_commands()} >= {"recipes.md", "retrieval.md", "rollout.md", "gpu.md"}


@pytest.mark.parametrize(("doc", "cmd"), doc_commands())
def test_a_docs_command_names_a_real_command_options_and_settings(doc: str, cmd: str) -> None:
    words = shlex.split(re.sub(r"\[[^\]]*\]", "", cmd).replace("...", ""))[1:]  # [optional parts] left out
    if not words or words == ["--version"]:
        return
    page = _help_page(words)
    assert page is not None, f"{doc} names a command that does not exist: {cmd}"
    for flag in (w.split("=")[0] for w in words if w.startswith("--")):
        assert flag in page, f"{doc} uses {flag}, which `searchrl {' '.join(words[:2])} --help` does not list: {cmd}"
    recipe = next((words[i + 1] for i, w in enumerate(words[:-1]) if w in ("--recipe", "--config", "-r")), None)
    if words[:2] == ["config", "show"] and len(words) > 2:
        recipe = words[2]
    profile = next((words[i + 1] for i, w in enumerate(words[:-1]) if w == "--profile"), None)
    overrides = [w for w in words if OVERRIDE.match(w)]
    if any(w.startswith("plugins=") for w in words):  # a plugin's names: tests/foundation/test_extending_doc.py
        return
    # no shipped recipe named (R, NAME): the keys and values still make a valid config
    load_config(recipe if recipe in recipe_names() else None, overrides, profile=profile)
