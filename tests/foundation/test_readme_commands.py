"""The README's how-to commands, taken from the README itself.

Code blocks fenced as ```` ```bash offline ```` run here exactly as written (in a scratch directory holding the files
of the README's ```` ```json file=PATH ```` blocks). Every other `searchrl` command in the README must name a real
subcommand and real options: each one's `--help` page is checked to list the flags it uses.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import searchrl
from searchrl.cli import app

SRC = Path(searchrl.__file__).resolve().parents[1]
README = SRC.parent / "README.md"
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```", re.S | re.M)


def blocks() -> list[tuple[str, str]]:
    return [(m.group(1).strip(), m.group(2)) for m in FENCE.finditer(README.read_text(encoding="utf-8"))]


def commands(body: str) -> list[str]:
    """`searchrl ...` lines of a block, continuation lines joined and trailing comments dropped."""
    out, joined = [], body.replace("\\\n", " ")
    for line in joined.splitlines():
        line = re.sub(r"\s+#\s.*$", "", line).strip()
        if line.startswith("searchrl ") or line == "searchrl":
            out.append(line)
        elif " -m searchrl " in line:
            out.append("searchrl " + line.split(" -m searchrl ", 1)[1])
    return out


def offline_commands() -> list[str]:
    return [c for info, body in blocks() if info.split() == ["bash", "offline"] for c in commands(body)]


def test_readme_marks_offline_commands_and_fixtures() -> None:
    files = [info for info, _ in blocks() if "file=" in info]
    assert len(offline_commands()) >= 5 and len(files) >= 2
    every = [c for info, body in blocks() if info.startswith("bash") for c in commands(body)]
    assert not [c for c in every if re.search(r"(data\.train=|--data )\S*dev\.jsonl", c) and " eval " not in c]


def test_offline_readme_commands_run(tmp_path: Path) -> None:
    for info, body in blocks():
        if m := re.search(r"file=(\S+)", info):
            (tmp_path / m.group(1)).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / m.group(1)).write_text(body, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    for cmd in offline_commands():
        argv = [sys.executable, "-m", "searchrl", *shlex.split(cmd)[1:]]
        res = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
        assert res.returncode == 0, f"README command failed: {cmd}\n{res.stderr[-2000:]}"
        assert res.stdout.strip(), f"README command printed no result on stdout: {cmd}"


def _help_page(words: list[str]) -> str | None:
    """The --help text of the longest command prefix of ``words`` that exists; None when none does."""
    runner = CliRunner()
    for n in (3, 2, 1):
        if len(words) < n or any(w.startswith("-") for w in words[:n]):
            continue
        res = runner.invoke(app, [*words[:n], "--help"], env={"COLUMNS": "400"})
        if res.exit_code == 0 and "Usage" in res.output:
            return res.output
    return None


@pytest.mark.parametrize(
    "cmd", sorted({c for info, body in blocks() if info.startswith("bash") for c in commands(body)})
)
def test_every_readme_command_names_real_options(cmd: str) -> None:
    words = shlex.split(cmd)[1:]
    if words in (["--version"], ["--help"]):
        return
    page = _help_page(words)
    assert page is not None, f"README names a command that does not exist: {cmd}"
    for flag in (w.split("=")[0] for w in words if w.startswith("--")):
        assert flag in page, f"README uses {flag}, which `{' '.join(words[:2])} --help` does not list: {cmd}"
