"""``searchrl data synth`` and ``searchrl data inspect`` through the CLI."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from searchrl.commands import data as data_cli
from searchrl.commands.data import app

runner = CliRunner()


def test_synth_writes_a_world_and_inspect_reads_it(tmp_path: Path) -> None:
    res = runner.invoke(app, ["synth", "--out", str(tmp_path / "w"), "--entities", "80", "--seed", "4"])
    assert res.exit_code == 0, res.output
    for name in ("corpus.jsonl", "train.jsonl", "dev.jsonl", "test.jsonl", "world.json"):
        assert (tmp_path / "w" / name).exists()
    assert "80 entities" in res.output

    res = runner.invoke(app, ["inspect", str(tmp_path / "w" / "dev.jsonl"), "--n", "2"])
    assert res.exit_code == 0, res.output
    n_dev = sum(1 for _ in (tmp_path / "w" / "dev.jsonl").open())
    assert "questions" in res.output and str(n_dev) in res.output
    assert "single_hop" in res.output and "answers per question" in res.output

    res = runner.invoke(app, ["inspect", str(tmp_path / "w" / "corpus.jsonl")])
    assert res.exit_code == 0, res.output
    assert "words per passage" in res.output and "80" in res.output

    res = runner.invoke(app, ["inspect", str(tmp_path / "w"), "--limit", "5"])  # a world directory: every file
    assert res.exit_code == 0 and res.output.count("first 5") == 4, res.output


def test_inspect_r1_searcher_and_kilt_files(tmp_path: Path) -> None:
    qa = tmp_path / "stage.jsonl"
    qa.write_text(json.dumps({"question": "who?", "answer": "me"}) + "\n")
    res = runner.invoke(app, ["inspect", str(qa)])
    assert res.exit_code == 0 and "stage-1" in res.output, res.output
    kilt = tmp_path / "kilt.jsonl"
    kilt.write_text(json.dumps({"wikipedia_title": "Zed", "text": ["Zed\n", "word " * 250]}) + "\n")
    res = runner.invoke(app, ["inspect", str(kilt)])
    assert res.exit_code == 0, res.output
    assert "min 51 / mean 83.7 / max 100" in res.output  # 251 words -> 100 + 100 + 51


def test_inspect_counts_ids_a_file_repeats(tmp_path: Path) -> None:
    qa = tmp_path / "merged.jsonl"
    rows = [("a", "q one?"), ("a", "q two?"), ("b", "q three?"), ("b", "q three?")]  # another question; the same one
    qa.write_text("".join(json.dumps({"id": i, "question": q, "answer": "x"}) + "\n" for i, q in rows))
    res = runner.invoke(app, ["inspect", str(qa)])
    assert res.exit_code == 0, res.output
    assert re.search(r"duplicate ids\s*│\s*2\b", res.output), res.output


def test_inspect_counts_sft_data_by_layout(tmp_path: Path, monkeypatch) -> None:
    """Trajectories (token ids and a loss mask), step-level samples and text rows are SFT data, not questions."""
    from searchrl.rollout.trajectory import Trajectory, Turn

    traj = Trajectory(uid="o/1", group_id="o/1", question_id="1", question="Who?", golds=["x"], prompt_ids=[1, 2, 3])
    traj.append([4, 5], sampled=True, logprobs=[0.0, 0.0])
    traj.append([6, 7, 8], sampled=False)
    traj.append([9], sampled=True, logprobs=[0.0])
    traj.turns = [Turn("<search>q</search>", "search", "stop"), Turn("<answer>x</answer>", "answer", "stop")]
    traj.stop_reason = "answer"
    step = {"prompt_ids": [1, 2], "response_ids": [3, 4, 5], "loss_mask": [1, 1, 1], "kind": "question_search"}
    text = {"question": "Who?", "response": "<answer>x</answer>"}
    data = tmp_path / "sft.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in (traj.to_dict(), step, text)))
    monkeypatch.setattr(data_cli.out, "width", 200)  # one line per statistic
    res = runner.invoke(app, ["inspect", str(data)])
    assert res.exit_code == 0, res.output
    assert "trajectory 1, step-level: question_search 1, text: response 1" in res.output
    assert re.search(r"tokens trained on\s*│\s*min 3 / mean 3.0 / max 3", res.output), res.output
    assert re.search(r"searches per trajectory\s*│\s*1: 1", res.output), res.output


def test_inspect_errors_name_the_fix(tmp_path: Path) -> None:
    odd = tmp_path / "odd.jsonl"
    odd.write_text(json.dumps({"foo": 1}) + "\n")
    res = runner.invoke(app, ["inspect", str(odd)])
    assert isinstance(res.exception, ValueError) and "cannot tell a QA file" in str(res.exception)
    assert "--field question=NAME --field answers=NAME" in str(res.exception)
    odd.write_text(json.dumps({"q": "Who wrote Hamlet?", "a": "Shakespeare"}) + "\n")
    res = runner.invoke(app, ["inspect", str(odd), "--field", "question=q", "--field", "answers=a"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["inspect", str(tmp_path / "missing.jsonl")])
    assert isinstance(res.exception, FileNotFoundError)
    res = runner.invoke(app, ["synth", "--out", str(tmp_path / "x"), "--entities", "3"])
    assert isinstance(res.exception, ValueError) and "--entities" in str(res.exception)


def test_data_subapp_is_registered() -> None:
    from searchrl.cli import app as root

    res = CliRunner().invoke(root, ["data", "--help"])
    assert res.exit_code == 0
    for command in ("synth", "inspect"):
        assert command in res.output


@pytest.mark.parametrize("name", ["synth", "inspect"])
def test_commands_have_examples(name: str) -> None:
    res = runner.invoke(app, [name, "--help"])
    assert res.exit_code == 0 and "Example:" in res.output


def test_synth_comparison_forms(tmp_path: Path) -> None:
    args = [
        "synth",
        "--out",
        str(tmp_path / "w"),
        "--entities",
        "300",
        "--yes-no",
        "0.5",
        "--bridge-comparisons",
        "0.5",
    ]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in (tmp_path / "w" / "train.jsonl").open()]
    forms = {r["metadata"]["template"].split(".")[0] for r in rows if r["metadata"]["kind"] == "comparison"}
    assert forms == {"comparison:same", "comparison:bridge"}
    res = runner.invoke(app, args[:5] + ["--yes-no", "0.7", "--bridge-comparisons", "0.5"])
    assert res.exit_code != 0 and "sum to at most 1" in res.output
    res = runner.invoke(app, [*args[:5], "--bridge-comparisons", "1", "--deaths"])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in (tmp_path / "w" / "train.jsonl").open()]
    assert any("died" in r["question"] for r in rows if r["metadata"]["template"].endswith("death_year"))
