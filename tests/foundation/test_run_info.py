"""Every run directory records how it ran: the resolved config and, per start, the command, versions, commit and
hardware (``run_info.jsonl``)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import torch

from searchrl import __version__
from searchrl.config import load_config, record_run
from searchrl.utils import run_environment


def test_a_run_records_its_config_and_one_line_per_start(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    cfg = load_config("demo", ["training.steps=7"])
    record_run(cfg, tmp_path / "run")
    record_run(cfg, tmp_path / "run")  # resumed: a second line, the first kept
    assert load_config(str(tmp_path / "run" / "config.yaml")).training.steps == 7
    lines = [json.loads(line) for line in (tmp_path / "run" / "run_info.jsonl").read_text().splitlines()]
    assert len(lines) == 2
    info = lines[0]
    assert info["searchrl"] == __version__ and info["command"]
    assert info["libraries"]["torch"].split("+")[0] == torch.__version__.split("+")[0]
    assert info["python"] and info["cpus"] >= 1 and info["processes"] == 1 and info["started"].endswith("+00:00")
    assert info["gpus"] == ([torch.cuda.get_device_name(0)] if torch.cuda.is_available() else [])


def test_the_commit_is_the_checkouts_with_a_dirty_mark() -> None:
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        assert run_environment()["commit"] is None  # not a checkout, or no git
        return
    assert run_environment()["commit"].removesuffix("+dirty") == head.stdout.strip()


def test_a_copy_inside_another_projects_repository_records_no_commit(tmp_path: Path) -> None:
    """An installed SearchRL (a venv inside some project's checkout) is not that project's commit."""
    import shutil
    import sys

    import searchrl.utils

    lib = tmp_path / "project" / ".venv" / "lib" / "searchrl"
    lib.mkdir(parents=True)
    shutil.copy(searchrl.utils.__file__, lib / "utils.py")
    try:
        for args in (
            ["init", "-q"],
            ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "x"],
        ):
            subprocess.run(["git", "-C", str(tmp_path / "project"), *args], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        return  # no git here: nothing to mistake
    code = (
        "import importlib.util, sys; spec = importlib.util.spec_from_file_location('u', sys.argv[1]); "
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); print(m._source_commit())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(lib / "utils.py")], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "None"
