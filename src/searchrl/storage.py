"""Writing a directory whole or not at all (:func:`atomic_dir`), and a disk that fills up meanwhile said in one line
naming where (:class:`DiskFull`) rather than as a library's traceback.

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

_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
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
