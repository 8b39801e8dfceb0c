"""A command outside ``searchrl run`` cut short by Ctrl-C says in one line what stopped and, when it can go on (a
checkpoint, answers or samples kept), how; the exit status stays 130. A SIGTERM's stop gets the same hint. A run cut
short by a full disk says so in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from searchrl import stages
from searchrl.cli import app
from searchrl.commands.common import said_when_stopped
from searchrl.utils import StopRequested

runner = CliRunner()


def _interrupted(write=None):
    """A stage that writes what a run stopped part-way leaves (``write()``), then gets Ctrl-C."""

    def stage(*args, **kwargs):
        if write is not None:
            write()
        raise KeyboardInterrupt

    return stage


def _checkpoint(out: Path) -> None:
    (out / "checkpoint").mkdir(parents=True)
    (out / "checkpoint" / "trainer_state.pt").write_bytes(b"x")


def test_a_stop_is_said_with_how_to_go_on() -> None:
    with pytest.raises(typer.Exit) as stop, said_when_stopped("thing", lambda: "again"):
        raise KeyboardInterrupt
    assert stop.value.exit_code == 130
    with pytest.raises(StopRequested, match=r"^stopped by SIGTERM; to go on: again$"):
        with said_when_stopped("thing", lambda: "again"):
            raise StopRequested("stopped by SIGTERM")
    with pytest.raises(StopRequested, match=r"^stopped by SIGTERM; to go on: --resume$"):  # its own way on is kept
        with said_when_stopped("thing", lambda: "again"):
            raise StopRequested("stopped by SIGTERM; to go on: --resume")


@pytest.mark.parametrize("saved", [True, False])
def test_train_cut_by_ctrl_c_says_so_and_names_the_resume_when_it_saved_a_checkpoint(
    tmp_path: Path, monkeypatch, saved: bool
) -> None:
    out = tmp_path / "run"
    monkeypatch.setattr(stages, "run_train", _interrupted(lambda: _checkpoint(out) if saved else None))
    res = runner.invoke(app, ["train", "--recipe", "demo", "--out", str(out)])
    assert res.exit_code == 130
    said = " ".join(res.output.split())
    assert f"RL training into {out} stopped (Ctrl-C)" in said
    assert ("to go on: the same searchrl train with --resume" in said) is saved


def test_sft_cut_by_ctrl_c_names_its_resume(tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "sft"
    monkeypatch.setattr(stages, "run_sft", _interrupted(lambda: _checkpoint(out)))
    res = runner.invoke(app, ["sft", "--recipe", "demo", "--out", str(out)])
    said = " ".join(res.output.split())
    assert (
        res.exit_code == 130
        and f"SFT into {out} stopped (Ctrl-C); to go on: the same searchrl sft with --resume" in said
    )


def test_eval_cut_by_ctrl_c_says_the_same_command_keeps_its_answers(tmp_path: Path, monkeypatch) -> None:
    qa, out = tmp_path / "qa.jsonl", tmp_path / "out"
    qa.write_text(json.dumps({"id": "q1", "question": "Q?", "golden_answers": ["A"]}) + "\n")

    def answered_some() -> None:
        (out / "predictions").mkdir(parents=True)
        (out / "predictions" / "qa__direct.jsonl.partial").write_text("{}\n")

    monkeypatch.setattr(stages, "evaluation", _interrupted(answered_some))
    res = runner.invoke(app, ["eval", "--data", str(qa), "--methods", "direct", "--out", str(out)])
    said = " ".join(res.output.split())
    assert res.exit_code == 130, res.output
    assert f"evaluation into {out} stopped (Ctrl-C); to go on: the same searchrl eval" in said


def test_dense_index_build_cut_by_ctrl_c_says_the_same_command_goes_on(tmp_path: Path, monkeypatch) -> None:
    from searchrl.retrieval import index

    corpus, out = tmp_path / "corpus.jsonl", tmp_path / "idx"
    corpus.write_text(json.dumps({"id": "p0", "contents": "T\ntext"}) + "\n")

    def encoded_some() -> None:
        (index.staging_dir(out) / "dense").mkdir(parents=True)
        (index.staging_dir(out) / "dense" / "encode.json").write_text("{}")

    monkeypatch.setattr(index, "build_index", _interrupted(encoded_some))
    res = runner.invoke(app, ["index", "build", "--corpus", str(corpus), "--kind", "dense", "--out", str(out)])
    said = " ".join(res.output.split())
    assert res.exit_code == 130, res.output
    assert f"dense index build into {out} stopped (Ctrl-C); to go on: the same searchrl index build" in said


def test_rejection_sampling_cut_by_ctrl_c_says_the_same_command_goes_on(tmp_path: Path, monkeypatch) -> None:
    qa, out = tmp_path / "qa.jsonl", tmp_path / "rs.jsonl"
    qa.write_text(json.dumps({"id": "q1", "question": "Q?", "golden_answers": ["A"]}) + "\n")
    monkeypatch.setattr(stages, "rejection_sampling", _interrupted(lambda: (tmp_path / "rs.jsonl.k.partial").touch()))
    res = runner.invoke(app, ["data", "rejection-sample", "--data", str(qa), "--out", str(out)])
    said = " ".join(res.output.split())
    assert res.exit_code == 130, res.output
    assert f"rejection-sample into {out} stopped (Ctrl-C); to go on: the same searchrl data rejection-sample" in said


def test_train_cut_by_a_full_disk_says_so_in_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    import errno
    import sys

    from searchrl.commands import main
    from searchrl.storage import DiskFull, full_message

    out = tmp_path / "run"

    def full(*args, **kwargs):
        raise DiskFull(
            errno.ENOSPC, full_message(out / "checkpoint", f"{out / 'checkpoint'} keeps its previous contents")
        )

    monkeypatch.setattr(stages, "run_train", full)
    monkeypatch.setattr(sys, "argv", ["searchrl", "train", "--recipe", "demo", "--out", str(out)])
    with pytest.raises(SystemExit) as stop:
        main()  # the command as installed: one line, exit 2, no traceback
    err = " ".join(capsys.readouterr().err.split())
    assert stop.value.code == 2 and "Traceback" not in err
    assert f"error: cannot write {out / 'checkpoint'}: the disk is full" in err
