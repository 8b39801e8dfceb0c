"""macOS and Windows, simulated on Linux: what those platforms lack (``os.pread``, ``os.fchmod`` before Python 3.13,
a UTF-8 default for text files) or do differently (a second bind on an SO_REUSEADDR port succeeds on Windows;
backslashes are path separators there, not escapes; a directory with a memory-mapped file in it cannot be renamed)
must not break the commands a laptop user runs."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import searchrl
from searchrl.data.corpus import Passage, PassageStore

SRC = Path(searchrl.__file__).resolve().parents[1]  # the source under test, for a fresh interpreter


def test_passages_are_read_without_os_pread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Windows has no ``os.pread``: every search reads its passages through the store."""
    passages = [Passage("d1", "Zoë", "Zoë Ångström was born in Malmö."), Passage("d2", "B", "plain text")]
    PassageStore.build(passages, tmp_path / "p").close()
    monkeypatch.delattr(os, "pread")
    store = PassageStore(tmp_path / "p")
    assert store.get_many([1, 0]) == passages[::-1]
    store.close()


def test_a_closed_store_keeps_no_file_of_its_directory_open(tmp_path: Path) -> None:
    """``index build`` renames the staging directory into place after closing the store; Windows refuses to rename
    a directory holding an open or memory-mapped file, so closing must release both."""
    if not Path("/proc/self/maps").exists():
        pytest.skip("needs /proc to see the process's open and mapped files")
    store = PassageStore.build([Passage("d1", "A", "text")], tmp_path / "p")
    assert store[0].text == "text"
    store.close()
    where = str(tmp_path / "p")
    mapped = [line for line in Path("/proc/self/maps").read_text().splitlines() if where in line]
    assert not mapped and not [fd for fd in os.listdir("/proc/self/fd") if _target(fd).startswith(where)]


def _target(fd: str) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:  # the descriptor listdir itself used, closed since
        return ""


def test_binary_files_are_opened_in_binary_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Windows opens a file descriptor in text mode unless given ``O_BINARY``: CR LF pairs in fp16 vectors would
    be folded into LF and a 0x1A byte would end the read."""
    import numpy as np

    from searchrl.retrieval.compressed import RowReader

    monkeypatch.setattr(os, "O_BINARY", 0x8000, raising=False)
    flags: list[int] = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda path, flag, *a: flags.append(flag) or real_open(path, flag & ~0x8000, *a))
    np.save(tmp_path / "v.npy", np.zeros((2, 4), dtype=np.float16))
    RowReader(tmp_path / "v.npy").close()
    PassageStore.build([Passage("d1", "A", "text")], tmp_path / "p").close()
    assert len(flags) == 2 and all(f & 0x8000 for f in flags)


def test_results_are_written_without_os_fchmod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``os.fchmod`` exists on Windows only from Python 3.13: every result file goes through this write."""
    from searchrl.utils import write_jsonl

    monkeypatch.delattr(os, "fchmod")
    path = write_jsonl(tmp_path / "rows.jsonl", [{"q": "Zoë"}])
    assert json.loads(path.read_text(encoding="utf-8")) == {"q": "Zoë"}
    assert path.stat().st_mode & 0o777 == 0o644


def test_a_taken_port_is_not_shared_on_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    """On Windows SO_REUSEADDR lets a second server bind a port another one listens on (both then answer), so a
    busy port would not fail: as ``socket.create_server``, the option is set on POSIX only."""
    from searchrl.commands import index

    options: list[int] = []

    class Recording(socket.socket):
        def setsockopt(self, level, option, *value):  # type: ignore[override]
            options.append(option)
            return super().setsockopt(level, option, *value)

    monkeypatch.setattr(index.socket, "socket", Recording)
    monkeypatch.setattr(sys, "platform", "win32")
    index._bind("127.0.0.1", 0).close()
    assert socket.SO_REUSEADDR not in options
    monkeypatch.setattr(sys, "platform", "linux")
    index._bind("127.0.0.1", 0).close()
    assert socket.SO_REUSEADDR in options


def test_an_mcp_command_line_keeps_windows_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """On Windows a backslash separates folders: ``--index C:\\idx\\bm25`` must reach the server as written."""
    from searchrl.tools.mcp import parse_server

    monkeypatch.setattr(sys, "platform", "win32")
    argv = parse_server(r'searchrl mcp serve --index C:\idx\bm25 --corpus "C:\my data\c.jsonl"')
    assert argv == ["searchrl", "mcp", "serve", "--index", r"C:\idx\bm25", "--corpus", r"C:\my data\c.jsonl"]
    monkeypatch.setattr(sys, "platform", "linux")
    assert parse_server(r"a b\ c 'd e'") == ["a", "b c", "d e"]  # POSIX: as a shell splits it


def _run_in_an_ascii_locale(code: str) -> None:
    """Run ``code`` in a Python whose locale encoding is ASCII (``LC_ALL=C``, UTF-8 mode and locale coercion off), as
    a cp1252 Windows is to text outside its code page."""
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")])
    env.pop("PYTHONIOENCODING", None)
    done = subprocess.run(
        [sys.executable, "-X", "utf8=0", "-c", code], env=env, capture_output=True, text=True, encoding="utf-8"
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_recipes_and_configs_are_read_and_written_as_utf8(tmp_path: Path) -> None:
    """Text files default to the locale's encoding (cp1252 on Windows), not UTF-8: the bundled recipes, a user's
    config with non-ASCII text, and a run's saved config must read the same under any locale. Simulated with an
    ASCII locale (``LC_ALL=C`` with UTF-8 mode and locale coercion off)."""
    (tmp_path / "mine.yaml").write_text("name: mine\ndescription: Réponds brièvement.\n", encoding="utf-8")
    code = (
        "from pathlib import Path; from searchrl.config.loading import dump_config, load_config, read_yaml\n"
        "assert load_config('search_r1_ppo').model.policy\n"
        f"cfg = load_config({str(tmp_path / 'mine.yaml')!r})\n"
        f"out = dump_config(cfg, Path({str(tmp_path)!r}) / 'run' / 'config.yaml')\n"
        "assert read_yaml(out)['description'] == cfg.description == 'R\\u00e9ponds bri\\u00e8vement.'\n"
    )
    _run_in_an_ascii_locale(code)


def test_a_resumed_rl_checkpoint_is_not_left_mapped_on_windows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The optimizer state loaded on resume keeps a memory-mapped ``trainer_state.pt`` mapped, and Windows cannot
    rename the checkpoint directory holding it when the next checkpoint replaces it."""
    import torch

    from searchrl.rl.checkpoint import load_state

    if not Path("/proc/self/maps").exists():
        pytest.skip("needs /proc to see the process's mapped files")
    torch.save({"optimizer": {"exp_avg": torch.ones(4096)}}, tmp_path / "trainer_state.pt")
    monkeypatch.setattr(sys, "platform", "win32")
    state = load_state(tmp_path / "trainer_state.pt")
    mapped = [line for line in Path("/proc/self/maps").read_text().splitlines() if str(tmp_path) in line]
    assert not mapped and state["optimizer"]["exp_avg"].sum() == 4096


def test_a_plugin_named_by_a_path_with_a_drive_colon_is_a_file(tmp_path: Path) -> None:
    """A plugin file is kept by its absolute path, which on Windows starts with a drive (``C:\\exp\\my_ext.py``):
    its colon does not start a ``:name``, so the file is still found, and editing it still re-runs the stages."""
    from searchrl.config.extensions import code_digests, split_file

    assert split_file(r"C:\exp\my_ext.py") == (r"C:\exp\my_ext.py", "")
    assert split_file(r"C:\exp\my_rewards.py:brevity") == (r"C:\exp\my_rewards.py", ":brevity")
    plugin = tmp_path / "d:" / "my_ext.py"  # the same colon in a POSIX path
    plugin.parent.mkdir()
    plugin.write_text("X = 1\n", encoding="utf-8")
    assert list(code_digests([str(plugin)])) == [str(plugin)]


def test_results_with_any_character_are_printed_through_a_cp1252_pipe(tmp_path: Path) -> None:
    """Windows writes a piped or redirected stdout in its ANSI code page (cp1252), simulated here on any system:
    a result holding a character outside it (a question in Japanese, an emoji) is still printed, not an error."""
    qa = tmp_path / "qa.jsonl"
    qa.write_text(
        json.dumps({"id": "q1", "question": "Who wrote 源氏物語 😀?", "answers": ["紫式部"]}) + "\n", "utf-8"
    )
    env = {**os.environ, "PYTHONIOENCODING": "cp1252"}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-m", "searchrl", "data", "inspect", str(qa)], env=env, capture_output=True)
    assert done.returncode == 0, done.stderr.decode("cp1252")[-2000:]
    out = done.stdout.decode("cp1252")  # valid in the pipe's encoding
    assert "\\u6e90\\u6c0f\\u7269\\u8a9e \\U0001f600" in out and "\\u7d2b\\u5f0f\\u90e8" in out


def test_a_cp1252_pipe_is_made_utf8_on_windows_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """On Windows a pipe's cp1252 is the system's code page, not a choice: the command writes UTF-8 there (as
    PYTHONUTF8=1 would). Elsewhere a non-UTF-8 stream keeps its encoding (the locale's), escaping what it lacks."""
    import io

    from searchrl.commands import _unicode_streams

    monkeypatch.delenv("PYTHONIOENCODING", raising=False)
    for platform, expected in (("win32", "源 é".encode()), ("linux", "\\u6e90 é".encode("cp1252"))):
        out, err = io.TextIOWrapper(io.BytesIO(), encoding="cp1252"), io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
        monkeypatch.setattr(sys, "stdout", out)
        monkeypatch.setattr(sys, "stderr", err)
        monkeypatch.setattr(sys, "platform", platform)
        _unicode_streams()
        out.write("源 é")
        out.flush()
        assert out.buffer.getvalue() == expected, platform
        assert (err.encoding, err.errors) == ("utf-8", "strict")  # a UTF-8 stream is left as it is


def test_a_page_on_another_drive_than_its_inputs_names_them_by_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On Windows there is no relative path between two drives (``os.path.relpath`` raises ValueError): ``view
    --out D:\\pages`` of files on C: still writes the page, naming them by their absolute path."""
    from searchrl.viz.viewer import write_viewer

    traj = {
        "question": "q",
        "golds": ["a"],
        "answer": "a",
        "turns": [{"text": "<answer> a </answer>", "action": "answer"}],
    }
    (tmp_path / "t.jsonl").write_text(json.dumps(traj) + "\n", encoding="utf-8")

    def other_drive(path: str, start: str | None = None) -> str:
        raise ValueError("path is on mount 'C:', start on mount 'D:'")

    monkeypatch.setattr(os.path, "relpath", other_drive)
    html = write_viewer([tmp_path / "t.jsonl"], tmp_path / "pages" / "view.html").read_text(encoding="utf-8")
    assert f"{(tmp_path / 't.jsonl').resolve()}:1" in html


def test_the_cache_lock_on_windows_locks_the_first_byte_around_the_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Windows has no ``fcntl``: ``file_lock`` locks the lock file's first byte with ``msvcrt.locking``, asks again
    when it gives up (after 10 s of another process holding it), and unlocks after the body, even a failed one."""
    import errno
    import types

    from searchrl.storage import file_lock

    calls: list[tuple[str, int, int]] = []

    def locking(fd: int, mode: int, nbytes: int) -> None:
        calls.append(("lock" if mode == 1 else "unlock", os.lseek(fd, 0, os.SEEK_CUR), nbytes))
        if len(calls) == 1:  # the first try finds it held by another process for the 10 s msvcrt waits
            raise OSError(errno.EDEADLOCK, "Resource deadlock avoided")

    monkeypatch.setitem(sys.modules, "fcntl", None)  # import fcntl -> ImportError
    monkeypatch.setitem(sys.modules, "msvcrt", types.SimpleNamespace(LK_LOCK=1, LK_UNLCK=0, locking=locking))
    lock = tmp_path / "cache" / ".idx.lock"
    lock.parent.mkdir()
    lock.write_text("held before\n", encoding="utf-8")  # "a" opens at its end: the lock is still on byte 0
    with pytest.raises(RuntimeError), file_lock(lock):
        calls.append(("body", -1, 0))
        raise RuntimeError("build failed")
    assert calls == [("lock", 0, 1), ("lock", 0, 1), ("body", -1, 0), ("unlock", 0, 1)]


def test_a_saved_models_searchrl_json_is_written_and_read_as_utf8(tmp_path: Path) -> None:
    """``searchrl.json`` holds the recipe's name and a prompt (a DeepSeek template's ``<｜User｜>``) as UTF-8: under
    an ASCII or cp1252 locale, saving a checkpoint failed with UnicodeEncodeError, and reading one back called a good
    record "not a SearchRL model record"."""
    (tmp_path / "mine.yaml").write_text("name: réponse\n", encoding="utf-8")
    code = (
        "from pathlib import Path; from searchrl.config.loading import load_config\n"
        "from searchrl.pipeline import make_protocol\n"
        "from searchrl.rollout.agent_file import read_agent_settings, record_agent\n"
        f"cfg = load_config({str(tmp_path / 'mine.yaml')!r}); out = Path({str(tmp_path)!r}) / 'model'; out.mkdir()\n"
        "record_agent(out, cfg, make_protocol(cfg), None)\n"
        "assert read_agent_settings(out)['rollout.protocol'] == cfg.rollout.protocol\n"
    )
    _run_in_an_ascii_locale(code)
