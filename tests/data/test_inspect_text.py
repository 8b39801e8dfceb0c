"""``searchrl data inspect`` and the terminal views show questions and passages as written: rich markup and emoji
codes in the data are text, not styling (a stray closing tag such as "[/b]" ended the command with an error)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from searchrl.commands import app

QUESTION = "Which [/red] band sang “Lemonade” :100: [bold]?"
TEXT = "Zürich is a city.[citation needed] It has [1] [b]bold[/b] text."


def test_inspect_shows_markup_and_emoji_codes_as_text(tmp_path: Path) -> None:
    qa = tmp_path / "qa.jsonl"
    qa.write_text(json.dumps({"id": "q[/b]1", "question": QUESTION, "answer": "Beyoncé [/x]"}) + "\n", "utf-8")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "d[/i]1", "contents": f"[/b] Zürich\n{TEXT}"}) + "\n", encoding="utf-8")
    shown_in = {qa: ["q[/b]1", "[/red]", ":100:", "[bold]?", "Beyoncé [/x]"], corpus: ["[citation", "[b]bold[/b]"]}
    for path, shown in shown_in.items():
        res = CliRunner().invoke(app, ["data", "inspect", str(path)], terminal_width=200)
        assert res.exit_code == 0, res.output
        for text in shown:
            assert text in res.stdout, text


def test_a_trajectory_printed_in_the_terminal_shows_its_answer_as_written() -> None:
    from rich.console import Console

    from searchrl.generation.fake import ByteTokenizer
    from searchrl.rollout.render import render_trajectory
    from searchrl.rollout.trajectory import Trajectory

    traj = Trajectory(
        uid="u", group_id="g", question_id="q", question="Q?", golds=["x"], prompt_ids=[3], response_ids=[]
    )
    traj.answer = "[/b] 東京 :100:"
    console = Console(record=True, width=200)
    render_trajectory(traj, ByteTokenizer(), to=console)
    assert "'[/b] 東京 :100:'" in console.export_text()
