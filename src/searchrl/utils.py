"""Small shared helpers: the rich console, progress bars, seeding, JSONL I/O and atomic writes."""

from __future__ import annotations

import ctypes
import gzip
import json
import logging
import os
import random
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


class _LogConsole(Console):
    """Rich's console, except that ``log`` to a file or a pipe (``nohup``, a cluster's job log) writes one plain line
    per message, ``[HH:MM:SS] message``: not wrapped at 80 columns, no source-file column, easy to grep."""

    def log(self, *objects: Any, **kwargs: Any) -> None:
        if self.is_terminal or not all(isinstance(o, str) for o in objects):
            super().log(*objects, **kwargs)
        else:
            self.print(f"[{time.strftime('%H:%M:%S')}] " + " ".join(objects), soft_wrap=True, highlight=False)


# log lines are read by people and by programs (a URL, a path): a terminal wraps them, rich must not break them
console = _LogConsole(stderr=True, soft_wrap=True, log_path=False)


class _LoggedProgress(Progress):
    """A rich progress bar that, when stderr is not a terminal (a CI log, ``nohup``, a pipe), instead prints one
    plain line per task every ``every`` percent, or at the first update after ``every_s`` seconds without a line
    (a 1000-step run is not silent for 50 steps), and at the end: readable in any log."""

    def __init__(self, *columns, every: float = 5.0, every_s: float = 600.0, **kwargs) -> None:
        super().__init__(*columns, **kwargs)
        self._plain = not self.console.is_terminal and not self.disable
        self._every, self._every_s = every, every_s
        self._last_pct: dict[int, float] = {}
        self._last_t: dict[int, float] = {}
        self._t0: dict[int, float] = {}
        self._start: dict[int, float] = {}  # work already done when the task was added (a resumed run)
        if self._plain:
            self.disable = True  # no live rendering; lines come from update()

    def add_task(self, description: str, *args, **kwargs):
        task = super().add_task(description, *args, **kwargs)
        self._last_pct[task], self._t0[task] = -1e9, time.perf_counter()
        self._last_t[task] = self._t0[task]
        self._start[task] = self._tasks[task].completed
        return task

    def advance(self, task_id, advance: float = 1) -> None:
        self.update(task_id, advance=advance)  # rich's advance() bypasses update(): route it through the logging

    def update(self, task_id, *args, **kwargs) -> None:
        super().update(task_id, *args, **kwargs)
        if not self._plain:
            return
        t = self._tasks[task_id]
        if not t.total:
            return
        pct = 100.0 * t.completed / t.total
        now = time.perf_counter()
        quiet = now - self._last_t[task_id] >= self._every_s
        if pct - self._last_pct[task_id] >= self._every or t.completed >= t.total or quiet:
            if pct == self._last_pct[task_id]:
                return
            self._last_pct[task_id], self._last_t[task_id] = pct, now
            elapsed = now - self._t0[task_id]
            done = t.completed - self._start[task_id]  # the rate comes from this process's work only
            eta = elapsed * (t.total - t.completed) / done if done > 0 else float("nan")
            desc = re.sub(r"\[/?[a-z ]*\]", "", str(t.description))
            print(
                f"[{time.strftime('%H:%M:%S')}] {desc}: {t.completed:g}/{t.total:g} ({pct:.0f}%) "
                f"elapsed {elapsed:.0f}s eta {eta:.0f}s",
                file=sys.stderr,
                flush=True,
            )


def progress(transient: bool = False, every: float = 5.0) -> Progress:
    """A progress bar with count, elapsed time and ETA, printed to stderr; plain lines every ``every`` percent when
    stderr is not a terminal. ``SEARCHRL_NO_PROGRESS=1`` silences it."""
    return _LoggedProgress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        console=console,
        transient=transient,
        disable=os.environ.get("SEARCHRL_NO_PROGRESS") == "1",
        every=every,
    )


_ALLOCATOR_TUNED = False


def hard_exit(code: int = 0) -> None:
    """Flush logging and stdio, then end the process with ``os._exit``, skipping interpreter teardown.

    For a multi-process (gloo) run whose work is done: left to teardown, the DDP reducer's dealloc holds the GIL
    while ``~ProcessGroupGloo`` joins a worker thread that needs the GIL to free its last barrier's work (a deadlock
    seen in CI), or a process aborts ("terminate called without an active exception")."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def tune_allocator() -> None:
    """Keep freed memory in the process instead of returning it to the OS (glibc only; a no-op elsewhere).

    A training step allocates and frees the same large activation buffers every micro-batch. glibc hands big blocks
    back to the kernel on free, so each step page-faults them in again (zero-filled): measured on a 2-core CPU, the
    first passes at a shape run at ~60% of the steady-state matmul rate and a fifth of the CPU time goes to the
    kernel. Raising the mmap and trim thresholds makes freed blocks reusable. Set ``SEARCHRL_MALLOC_TUNING=0`` to
    keep glibc's defaults."""
    global _ALLOCATOR_TUNED
    if _ALLOCATOR_TUNED or os.environ.get("SEARCHRL_MALLOC_TUNING") == "0":
        return
    _ALLOCATOR_TUNED = True
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD: keep up to 1 GiB of free heap
        libc.mallopt(-3, 1 << 30)  # M_MMAP_THRESHOLD: big blocks come from the heap, so they are reused
    except (OSError, AttributeError):
        pass


def make_adamw(params, lr: float, weight_decay: float = 0.0, betas: tuple[float, float] = (0.9, 0.999)):
    """AdamW with the fused kernel where torch has one for the parameters' device (CPU included since torch 2.4)."""
    import torch

    params = list(params)
    if any(p.dtype == torch.float16 for p in params):  # nothing scales the loss: fp16 gradients would underflow
        raise ValueError("fp16 weights cannot be trained (no loss scaling); load the model in float32 or bfloat16")
    try:
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, betas=betas, fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, betas=betas)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:
        pass
    try:
        import torch

        torch.manual_seed(seed)
    except ImportError:
        pass


def open_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """Yield (line_number, text) of a text file, plain or gzip-compressed (``.gz``), decoded as UTF-8.

    A line that is not UTF-8 raises ValueError naming ``file:line`` and the byte offset, instead of a bare
    UnicodeDecodeError; a file that is not gzip or is cut short raises ValueError too. A byte-order mark is dropped.
    A last line cut inside a character (a file still being written) comes without that character: incomplete.
    """
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        lines = enumerate(f, 1)
        while True:
            try:
                i, raw = next(lines)
            except StopIteration:
                return
            except (OSError, EOFError) as err:  # not gzip, or cut short
                raise ValueError(f"{path}: cannot be read ({err}); re-download or re-compress it") from None
            try:
                yield i, raw.decode("utf-8-sig" if i == 1 else "utf-8")  # -sig: an editor's byte-order mark
            except UnicodeDecodeError as err:
                if raw.endswith(b"\n") or err.reason != "unexpected end of data":
                    raise ValueError(
                        f"{path}:{i}: not UTF-8 text (byte {err.start} of the line is 0x{raw[err.start]:02x}); "
                        "re-encode the file as UTF-8, e.g. iconv -f latin1 -t utf-8"
                    ) from None
                yield i, raw[: err.start].decode("utf-8-sig")  # the last line, cut inside a character


def read_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line_number, object) of a ``.jsonl`` or ``.jsonl.gz`` file; a line that is not a JSON object (or not
    UTF-8) raises ValueError naming file:line."""
    path = Path(path)
    for i, line in open_lines(path):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{i}: not valid JSON ({err.msg}); fix or remove that line") from None
        if not isinstance(obj, dict):
            raise ValueError(f"{path}:{i}: expected a JSON object, got {type(obj).__name__}")
        yield i, obj


def json_plain(value: Any) -> Any:
    """``json.dumps``'s ``default``: a value JSON has no type for (a question's metadata read from parquet or a
    dataset: a date, an array) as the nearest one JSON has."""
    if hasattr(value, "tolist"):
        return value.tolist()
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def write_jsonl(path: str | Path, rows: Iterable[dict[str, Any]]) -> Path:
    """Write ``rows`` as JSON lines, streamed and atomically (see :func:`atomic_write_lines`); values JSON has no
    type for are written as :func:`json_plain` makes them."""
    atomic_write_lines(path, (json.dumps(r, ensure_ascii=False, default=json_plain) + "\n" for r in rows))
    return Path(path)


def atomic_write_text(path: str | Path, text: str) -> Path:
    atomic_write_lines(path, [text])
    return Path(path)


def atomic_write_lines(path: str | Path, lines: Iterable[str]) -> int:
    """Write ``lines`` (each with its own newline) into ``path`` through a temporary file beside it, so the file
    appears complete or not at all, even when ``lines`` raises part-way. Returns how many lines were written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are meant to be read by others (os.fchmod: not Windows)
    n = 0
    try:
        # a lone surrogate (a "\\ud800" escape in an input file) is written as that escape: in JSON the same string
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as f:
            for line in lines:
                f.write(line)
                n += 1
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return n


def _root() -> Path:
    here = Path(__file__).resolve().parents[2]
    return here if (here / "pyproject.toml").is_file() else Path.cwd().resolve()


def portable_text(text: str) -> str:
    """``text`` with this machine's absolute paths made portable, for results that are committed or shared.

    The interpreter becomes ``python``, its bin directory is dropped (``.venv/bin/searchrl`` -> ``searchrl``), paths
    under the repository become relative to it, and paths beside it start with ``../``; the home directory becomes
    ``~``.
    """
    exe = Path(sys.executable)
    root = _root()
    pairs = [
        (str(exe), "python"),
        (str(exe.resolve()), "python"),
        (str(exe.parent) + "/", ""),
        (str(root) + "/", ""),
        (str(root), "."),
        (str(root.parent) + "/", "../"),
        (str(Path.home()) + "/", "~/"),
    ]
    for old, new in sorted(pairs, key=lambda p: -len(p[0])):
        if len(old) > 1:
            text = text.replace(old, new)
    return text


def write_portable(path: str | Path, text: str) -> Path:
    """Write a result file (markdown, JSON, HTML) with :func:`portable_text` applied: no absolute paths in it."""
    return atomic_write_text(path, portable_text(text))


def source_digest(source: str | Path) -> str:
    """12 hex digits of a file's resolved path, size and mtime (a changed file gets a new digest); an ``hf:``
    source of its text, and of its directory's stat when it names a local dataset directory; a missing file of its
    name. Names what the cache derives from a user's file."""
    import hashlib

    key = str(source)
    if key.startswith("hf:"):
        local = Path(key[3:].split(":")[0]).expanduser()
        st = local.stat() if local.is_dir() else None
    else:
        path = Path(source).resolve()
        key, st = str(path), path.stat() if path.exists() else None
    key += f"|{st.st_size if st else 0}|{st.st_mtime_ns if st else 0}"
    return hashlib.sha256(key.encode()).hexdigest()[:12]


#: the files a model directory's weights are in
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf", ".onnx")


def weights_fingerprint(spec: str | None) -> list[str]:
    """A local model directory's resolved path and its weight files' digests (path, size, modification time); []
    for a hub id or a bundled model, which no earlier stage or training in place can change."""
    path = Path(spec).expanduser() if spec else None
    if path is None or not path.is_dir():
        return []
    files = sorted(f for f in path.rglob("*") if f.is_file() and f.suffix in WEIGHT_SUFFIXES)
    return [str(path.resolve()), *(source_digest(str(f)) for f in files)]


def lone_surrogate(text: str) -> str | None:
    """The first lone surrogate in ``text`` (half a UTF-16 pair, as JSON's ``\\ud800`` escape or a non-UTF-8 byte
    gives it; no tokenizer or UTF-8 file takes one), escaped for a message; None when there is none.

    >>> print(lone_surrogate("café"), lone_surrogate("a" + chr(0xD800) + "b"))
    None \\ud800
    """
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        return text[err.start].encode("unicode_escape").decode()
    return None


def error_line(err: BaseException, limit: int = 160) -> str:
    """The first line of an exception's message (its type when it has none), for a one-line error."""
    return (str(err).strip().splitlines() or [type(err).__name__])[0][:limit]


def restore_interrupted(path: Path) -> None:
    """A save by :func:`searchrl.storage.atomic_dir` that stopped between its two renames left the previous copy,
    whole, at ``<path>.old`` and nothing at ``path``: put it back."""
    old = path.with_name(path.name + ".old")
    if not path.exists() and old.is_dir():
        try:
            old.rename(path)
        except FileNotFoundError:  # another process of the run put it back first
            pass


@contextmanager
def eval_mode(module: Any) -> Iterator[None]:
    """A torch ``module`` in eval mode (dropout off) while inside, for decoding or a scoring pass; every submodule's
    own mode is put back after (a frozen part stays in eval mode, the rest goes back to training)."""
    modes = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        yield
    finally:
        for m, training in modes:
            m.training = training


def _source_commit() -> str | None:
    """The git commit of the SearchRL source this runs from ("+dirty" with uncommitted changes to it), or None
    outside a checkout of SearchRL itself (an installed wheel, even inside another project's repository) or without
    git."""
    import subprocess

    here = Path(__file__).resolve().parent

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(here), *args], capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()

    try:
        if git("rev-parse", "--show-prefix") != "src/searchrl/":  # the package's own checkout, not a repo around it
            return None
        commit = git("rev-parse", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".")
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("+dirty" if dirty else "") if commit else None


def run_environment() -> dict[str, Any]:
    """What a run's results depend on beside its config: the command, SearchRL's version and commit, the versions
    of the libraries that compute, and the hardware; a line of a run directory's ``run_info.jsonl``."""
    import platform
    from datetime import UTC, datetime
    from importlib import metadata

    from searchrl import __version__

    def version(dist: str) -> str | None:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    import torch

    cuda = torch.cuda.is_available()
    return {
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
        "searchrl": __version__,
        "commit": _source_commit(),
        "python": platform.python_version(),
        "libraries": {d: version(d) for d in ("torch", "transformers", "accelerate", "peft", "vllm")},
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else [],
        "processes": int(os.environ.get("WORLD_SIZE", "1")),
        "host": platform.node(),
        "pid": os.getpid(),
        "job": os.environ.get("SLURM_JOB_ID") or os.environ.get("PBS_JOBID") or os.environ.get("LSB_JOBID"),
    }


class MissingDependency(ImportError):
    """An optional package a setting needs is not installed; the message names the setting and the install."""


class ResumeRefused(ValueError):
    """A checkpoint that may not be gone on from (what it was trained on changed): ``searchrl run`` starts the stage
    again; a command says how to start afresh (``fix``)."""

    def __init__(self, why: str, fix: str) -> None:
        super().__init__(f"{why}; {fix}")
        self.why = why


class StopRequested(SystemExit):
    """A run stopped by SIGTERM (a cluster's preemption, ``kill``): exit status 143, as the signal's own would be,
    after saying where it stopped and how to go on."""

    def __init__(self, message: str) -> None:
        super().__init__(143)
        self.message = message

    def __str__(self) -> str:
        return self.message


@contextmanager
def on_sigterm(defer: bool = False) -> Iterator[Callable[[], bool]]:
    """While inside, SIGTERM raises :class:`StopRequested` at once (``defer=False``: the run logs why it ended
    instead of vanishing), or only sets a flag the caller polls at a safe point (``defer=True``: the RL trainer saves
    a checkpoint first). Yields the poll. The previous handler comes back after; outside the main thread, where no
    signal handler can be set, nothing changes."""
    import signal

    got: list[int] = []

    def handler(signum: int, frame: Any) -> None:
        got.append(signum)
        if not defer:
            raise StopRequested("stopped by SIGTERM")

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield lambda: False
        return
    try:
        yield lambda: bool(got)
    finally:
        signal.signal(signal.SIGTERM, previous)
