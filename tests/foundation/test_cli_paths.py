"""Output paths a command cannot use are refused in one line before any work: a file where a directory is written,
a directory where a file is written, and an output that is the command's own input (which it would destroy)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from searchrl.commands import app

runner = CliRunner()


@pytest.fixture
def files(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    rows = [{"id": f"q{i}", "question": f"Question {i}?", "golden_answers": ["a"]} for i in range(6)]
    (tmp_path / "q.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (tmp_path / "sd").mkdir()
    (tmp_path / "sd" / "train.jsonl").write_text((tmp_path / "q.jsonl").read_text(), encoding="utf-8")
    return tmp_path


def _refused(args: list[str], says: str) -> None:
    res = runner.invoke(app, args)
    assert res.exit_code == 2, res.output
    assert says in " ".join(res.output.split()), res.output  # the error box wraps lines
    assert "Traceback" not in res.output


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["index", "build", "--corpus", "q.jsonl", "--kind", "bm25", "--out", "q.jsonl"], "q.jsonl is a file"),
        (["data", "synth", "--out", "q.jsonl"], "q.jsonl is a file; give a directory path"),
        (["data", "split", "q.jsonl", "--out", "q.jsonl"], "q.jsonl is a file"),
        (["eval", "--data", "q.jsonl", "--methods", "prior", "--out", "q.jsonl"], "q.jsonl is a file"),
        (["run", "--recipe", "demo", "--out", "q.jsonl", "--dry-run"], "q.jsonl is a file"),
        (["data", "contexts", "q.jsonl", "--out", "sd"], "sd is a directory; give a file path"),
        (
            ["run", "--recipe", "demo", "--out", "q.jsonl/r", "--dry-run"],
            "q.jsonl/r cannot be made: q.jsonl is a file",
        ),
        (["train", "--recipe", "demo", "--out", "q.jsonl/r"], "q.jsonl/r cannot be made: q.jsonl is a file"),
    ],
)
def test_a_file_for_a_directory_or_the_reverse_is_one_line(files: Path, args: list[str], says: str) -> None:
    _refused(args, says)


def test_an_output_directory_you_cannot_write_is_refused_before_any_work(files: Path, monkeypatch) -> None:
    import os

    access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: Path(p).name != "sd" and access(p, mode))
    _refused(["run", "--recipe", "demo", "--out", "sd/run", "--dry-run"], "sd/run cannot be made or written: sd is")
    assert not (files / "sd" / "run").exists()


def test_an_output_that_is_the_input_is_refused_and_the_input_kept(files: Path) -> None:
    before = (files / "sd" / "train.jsonl").read_text()
    _refused(["data", "split", "sd/train.jsonl", "--out", "sd", "--heldout", "2"], "would overwrite the input")
    _refused(["data", "contexts", "q.jsonl", "--out", "q.jsonl"], "would overwrite the input q.jsonl")
    select = ["data", "select-difficulty", "--recipe", "demo", "--data", "q.jsonl", "--index", "nowhere"]
    _refused([*select, "--out", "kept.jsonl", "--records", "q.jsonl"], "would overwrite the input q.jsonl")
    _refused([*select, "--out", "kept.jsonl", "--records", "kept.jsonl"], "kept.jsonl is also --out")
    assert (files / "q.jsonl").stat().st_size > 0
    assert (files / "sd" / "train.jsonl").read_text() == before and len(before.splitlines()) == 6
    res = runner.invoke(app, ["data", "split", "sd/train.jsonl", "--out", "split", "--heldout", "2"])
    assert res.exit_code == 0, res.output  # elsewhere it writes as before
    assert len((files / "split" / "train.jsonl").read_text().splitlines()) == 4


def test_an_empty_question_is_refused(files: Path) -> None:
    _refused(["ask", "  ", "--index", "nowhere"], "the question is empty")
    # a byte that is not UTF-8 on the command line (Python's surrogateescape): refused, not the tokenizer's TypeError
    _refused(["ask", "Who \udcff directed it?", "--index", "nowhere"], "(b'\\xff'); type it in a UTF-8 terminal")


def test_a_corpus_given_as_the_index_names_the_build(files: Path) -> None:
    res = runner.invoke(app, ["ask", "Who?", "--index", "q.jsonl"])
    assert res.exit_code != 0
    err = str(res.exception) if res.exception else res.output
    assert "q.jsonl is a file, not an index directory" in err and "--corpus q.jsonl" in err and "--out q-bm25" in err


def test_a_split_that_leaves_nothing_to_train_on_is_refused(files: Path) -> None:
    res = runner.invoke(app, ["data", "split", "q.jsonl", "--out", "split", "--heldout", "6"])
    assert res.exit_code != 0 and "leaves none to train on; hold out 0 to 5" in str(res.exception), res.output
    assert not (files / "split" / "train.jsonl").exists()


def test_a_directory_given_as_a_corpus_or_predictions_file_says_so(files: Path) -> None:
    from searchrl.eval.rescore import rescore_file
    from searchrl.retrieval.index import build_index

    with pytest.raises(FileNotFoundError, match="corpus .*sd is a directory; give a .jsonl"):
        build_index(files / "sd", "bm25", files / "idx")
    (files / "ev" / "predictions").mkdir(parents=True)
    (files / "ev" / "predictions" / "dev__agent.jsonl").write_text("", encoding="utf-8")
    with pytest.raises(FileNotFoundError, match=r"ev is a directory; give its predictions files, e\.g\. .*dev__agent"):
        rescore_file(files / "ev", ["em"])


def test_models_where_refuses_an_empty_spec_and_suggests_a_near_alias() -> None:
    res = runner.invoke(app, ["models", "where", ""])
    assert res.exit_code != 0 and "is not a local directory, an alias or a hub id" in str(res.exception)
    res = runner.invoke(app, ["models", "where", "smollm2-135m"])
    assert res.exit_code == 0 and "did you mean the alias 'smollm2-135m-instruct'?" in " ".join(res.output.split())


def test_an_output_path_through_a_file_from_the_config_is_one_line(files: Path) -> None:
    """An output directory set in the config (no --out to check) under a file was a NotADirectoryError traceback."""
    import os
    import subprocess
    import sys

    import searchrl

    src = str(Path(searchrl.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    prior = [{"id": f"t{i}", "question": f"Training question {i}?", "golden_answers": ["b"]} for i in range(4)]
    (files / "prior.jsonl").write_text("".join(json.dumps(r) + "\n" for r in prior), encoding="utf-8")
    args = ["eval", "--data", "q.jsonl", "--methods", "prior", "--prior-data", "prior.jsonl"]
    res = subprocess.run(
        [sys.executable, "-m", "searchrl", *args, "--set", "evaluation.output_dir=q.jsonl/out"],
        cwd=files,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.strip().splitlines()[-1] == "error: [Errno 20] Not a directory: 'q.jsonl/out'"
