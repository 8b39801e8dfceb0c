"""Progress in a non-interactive log: plain lines every few percent, whether a task is advanced or updated."""

from __future__ import annotations

import pytest

from searchrl import utils


@pytest.mark.parametrize("how", ["advance", "update"])
def test_plain_progress_lines_in_a_log(monkeypatch, capsys, how: str) -> None:
    monkeypatch.delenv("SEARCHRL_NO_PROGRESS", raising=False)
    with utils.progress(every=25.0) as bar:
        assert bar._plain  # pytest captures stderr: not a terminal
        task = bar.add_task("eval / agent", total=8)
        for _ in range(8):
            bar.advance(task, 1) if how == "advance" else bar.update(task, advance=1)
    lines = [line for line in capsys.readouterr().err.splitlines() if "eval / agent" in line]
    assert [line.split(": ")[1].split(" ")[0] for line in lines] == [
        "1/8",
        "3/8",
        "5/8",
        "7/8",
        "8/8",
    ]  # the first, then every 25%
