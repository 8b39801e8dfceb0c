"""Writing a directory whole or not at all (:func:`atomic_dir`), and a disk that fills up meanwhile said in one line
naming where (:class:`DiskFull`) rather than as a library's traceback; one process at a time building a shared
directory (:func:`file_lock`).

Libraries report a full disk each their own way: Python's writes raise ``OSError`` (ENOSPC; EDQUOT past a quota),
safetensors a ``SafetensorError`` whose message says "No space left on device", and ``torch.save`` a
``RuntimeError`` from its zip writer that does not say why ("unexpected pos ..."): that one is recognised by the
space left where it wrote."""

from __future__ import annotations

import errno
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_FULL_ERRNOS = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))  # EDQUOT: not on every platform
_FULL_TEXTS = ("no space left on device", "disk quota exceeded")
#: bytes free below which a write that failed without saying why is taken for one that filled the disk
_NEARLY_FULL = 1 << 20


class DiskFull(OSError):
    """A write that ran out of disk space (or quota): ``DiskFull(errno.ENOSPC, line)``, whose message is the line,
    naming where and what was kept."""

    def __str__(self) -> str:
        return str(self.strerror)


def disk_full(err: BaseException, where: Path) -> bool:
    """``err`` (or an error that led to it) is a write into ``where`` that ran out of disk space."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in _FULL_ERRNOS:
            return True
        if any(text in str(seen).lower() for text in _FULL_TEXTS):
            return True
        seen = seen.__cause__ or seen.__context__
    if not isinstance(err, RuntimeError):
        return False
    try:
        return shutil.disk_usage(where).free < _NEARLY_FULL
    except OSError:
        return False


def full_message(path: Path, kept: str) -> str:
    """The one line a :class:`DiskFull` says: ``path`` and what is ``kept``."""
    return f"cannot write {path}: the disk is full (no space left on it); {kept}: free some space, then run again"


@contextmanager
def full_said(path: Path, kept: str) -> Iterator[None]:
    """Inside, a write into ``path`` that runs out of disk space raises :class:`DiskFull` naming it and what is
    ``kept``; any other error passes as it is."""
    try:
        yield
    except DiskFull:
        raise
    except Exception as err:
        if disk_full(err, path.parent):
            raise DiskFull(errno.ENOSPC, full_message(path, kept)) from err
        raise


@contextmanager
def atomic_dir(path: Path) -> Iterator[Path]:
    """Yield a sibling temp dir to fill; on success it replaces ``path`` (the old one is removed only afterwards;
    :func:`searchrl.utils.restore_interrupted` recovers it from a stop between the renames). A fill that fails
    removes the temp dir (nothing half-written stays to be taken, or to hold the space), leaving ``path`` as it was;
    one that ran out of disk space raises :class:`DiskFull`."""
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        yield tmp
    except BaseException as err:
        full = isinstance(err, Exception) and disk_full(err, tmp)  # measured before the temp dir frees its space
        shutil.rmtree(tmp, ignore_errors=True)
        if full:
            kept = f"{path} keeps its previous contents" if path.exists() else "nothing was written"
            raise DiskFull(errno.ENOSPC, full_message(path, kept)) from err
        raise
    old = path.with_name(path.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if path.exists():
        path.rename(old)
    tmp.rename(path)
    shutil.rmtree(old, ignore_errors=True)


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on the file ``path`` (created if missing, left in place) while inside: another process
    asking for it waits until this one leaves. An advisory POSIX lock; on Windows, a lock on the file's first byte."""
    try:
        import fcntl
    except ImportError:  # Windows
        with _first_byte_lock(path):
            yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@contextmanager
def _first_byte_lock(path: Path) -> Iterator[None]:
    """:func:`file_lock` on Windows: ``msvcrt.locking`` of byte 0. It gives up after 10 tries a second apart
    (EDEADLOCK), so it is asked again until the other process leaves."""
    import msvcrt

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        while True:
            f.seek(0)  # the locked bytes start at the file position ("a" opens at the end)
            try:
                msvcrt.locking(f.fileno(), msvcrt.LK_LOCK, 1)
                break
            except OSError as err:
                if err.errno != errno.EDEADLOCK:
                    raise
        try:
            yield
        finally:
            f.seek(0)
            msvcrt.locking(f.fileno(), msvcrt.LK_UNLCK, 1)
