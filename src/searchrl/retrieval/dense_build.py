"""Building a dense index without holding its vectors: passages are encoded chunk by chunk straight to disk, and an
interrupted encoding resumes where it stopped.

Where the encoded rows go depends on the index type (``vector_target``):

- ``flat``: straight into ``index.faiss``, laid out as faiss writes an ``IndexFlatIP`` (a 45-byte header, then the
  float32 rows), so the vectors are never in memory at all and the file is the one ``faiss.write_index`` writes;
- ``ivf`` / ``hnsw``: a float32 staging file, ``vectors.f32.npy``; the index is then trained on a sample of its
  rows and given them in chunks (ivf), or given them all through a memory map of the file (hnsw, whose graph
  depends on how its vectors are batched), written, and the staging file removed;
- a faiss factory string (compressed): ``vectors.f16.npy``, the index's own fp16 re-ranking vectors.

With a resume key (what the vectors depend on: the corpus file's path, size and mtime, the cut into passages, the
encoder and its passage convention), the number of rows written is recorded in ``encode.json`` beside the file,
every ``SAVE_EVERY_S`` seconds and when the encoding stops on an error or an interrupt. A later build with the same
key that writes the same file continues after those rows (its header must match too); any other build starts
afresh.
"""

from __future__ import annotations

import functools
import itertools
import json
import shutil
import struct
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from searchrl.retrieval.compressed import VECTORS_FILE, RowFile, VectorWriter
from searchrl.utils import atomic_write_text, console

PROGRESS_FILE = "encode.json"
#: float32 rows of an ivf / hnsw build, staged until the index holds them.
STAGED_VECTORS = "vectors.f32.npy"
#: how often the count of encoded rows is recorded (also on any error or interrupt).
SAVE_EVERY_S = 30.0

#: passage texts in store order, or a function giving them from a row on (so a resumed build need not read the
#: rows it skips).
Texts = Iterable[str] | Callable[[int], Iterable[str]]


def flat_header(n: int, d: int) -> bytes:
    """The header faiss writes before the rows of an (N, D) ``IndexFlatIP`` (see ``searchrl.retrieval.convert``)."""
    return struct.pack("<4siqqq?iQ", b"IxFI", d, n, 1 << 20, 1 << 20, True, 0, n * d)


@functools.cache
def flat_layout_known() -> bool:
    """Whether this faiss writes an ``IndexFlatIP`` as ``flat_header`` and the float32 rows (checked on 2 rows)."""
    import faiss

    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    index = faiss.IndexFlatIP(3)
    index.add(x)
    return faiss.serialize_index(index).tobytes() == flat_header(2, 3) + x.tobytes()


def vector_target(directory: Path, options: Any, n: int, d: int) -> tuple[Path, str, bytes | None]:
    """(file, dtype, header) the encoded rows of an index of type ``options.faiss`` are written to."""
    if options.compressed:
        return directory / VECTORS_FILE, "<f2", None
    if options.faiss == "flat" and flat_layout_known():
        return directory / "index.faiss", "<f4", flat_header(n, d)
    return directory / STAGED_VECTORS, "<f4", None


def empty_faiss_index(n: int, d: int, options: Any) -> tuple[Any, int]:
    """An inner-product faiss index of type ``options.faiss`` (flat, hnsw, ivf) for ``n`` vectors, and the rows
    to train it on (0: no training; ivf: 256 per inverted list, at most ``n``)."""
    import faiss

    if options.faiss == "flat":
        return faiss.IndexFlatIP(d), 0
    if options.faiss == "hnsw":
        return faiss.IndexHNSWFlat(d, options.hnsw_m, faiss.METRIC_INNER_PRODUCT), 0
    nlist = options.nlist or max(1, min(int(4 * np.sqrt(n)), n // 39 or 1))  # faiss wants >= 39 points/list
    index = faiss.IndexIVFFlat(faiss.IndexFlatIP(d), d, nlist, faiss.METRIC_INNER_PRODUCT)
    return index, min(n, 256 * nlist)


def index_from_rows(rows: RowFile, options: Any) -> Any:
    """A flat / hnsw / ivf index of the float32 rows of a file, the same index ``dense.make_faiss_index`` makes
    of the same vectors in an array.

    ivf is trained on the same sample (the same seed) and filled chunk by chunk. An HNSW graph depends on how its
    vectors are batched, so flat and hnsw are given all rows in one call, through a read-only memory map of the
    file: faiss copies them into its own storage, and the file's pages stay in the kernel's page cache (shared
    and reclaimable), not in a second array.
    """
    n, d = rows.shape
    index, train = empty_faiss_index(n, d, options)
    if not train:
        view = np.memmap(rows.path, rows.dtype, "r", rows.offset, rows.shape)  # (N, D) float32, on disk
        index.add(view)
        del view
        return index
    sample = rows.sample(train, seed=0)  # (train, D) float32
    index.train(sample)
    del sample
    for chunk in rows.chunks():
        index.add(chunk)
    return index


def _json_key(key: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if key is None else json.loads(json.dumps(key))


def _progress(directory: Path) -> dict[str, Any]:
    try:
        record = json.loads((directory / PROGRESS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def keep_resumable(directory: Path, key: dict[str, Any]) -> bool:
    """Whether ``directory`` holds encoded rows recorded under ``key``; if so, everything else in it is removed
    (a half-built index, a half-exported encoder) and True returned."""
    record = _progress(directory)
    if not record or record.get("key") != _json_key(key) or not isinstance(record.get("file"), str):
        return False
    for child in directory.iterdir():
        if child.name not in (PROGRESS_FILE, record["file"]):
            shutil.rmtree(child) if child.is_dir() else child.unlink()
    return True


def resume_point(directory: Path, key: dict[str, Any] | None, path: Path, n: int, d: int) -> int:
    """Rows already encoded into ``path`` under ``key`` (0 when there is no such record)."""
    if key is None:
        return 0
    record = _progress(directory)
    rows = record.get("rows")
    if record.get("key") != _json_key(key) or record.get("file") != path.name or record.get("shape") != [n, d]:
        return 0
    return rows if isinstance(rows, int) and 0 <= rows <= n else 0


def encode_to_file(
    texts: Texts,
    n: int,
    d: int,
    path: Path,
    encode: Callable[[list[str]], np.ndarray],
    *,
    dtype: str = "<f2",
    header: bytes | None = None,
    chunk: int = 512,
    key: dict[str, Any] | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> int:
    """Encode ``n`` texts, ``chunk`` at a time, into the rows of ``path``; returns the row it resumed from (0: a
    fresh encoding). With a ``key``, progress is recorded in ``encode.json`` beside ``path`` (see the module)."""
    start = resume_point(path.parent, key, path, n, d)
    if not start:  # an interrupted build's rows in another file (another index type): not to ship with this index
        stale = _progress(path.parent).get("file")
        if isinstance(stale, str) and stale != path.name and "/" not in stale:
            (path.parent / stale).unlink(missing_ok=True)
    writer = None
    if start:
        try:
            writer = VectorWriter(path, n, d, dtype=dtype, header=header, start=start)
        except (OSError, ValueError):  # the file is not what the record says: encode everything again
            start = 0
    if writer is None:
        writer = VectorWriter(path, n, d, dtype=dtype, header=header)
    key = _json_key(key)
    progress = path.parent / PROGRESS_FILE

    def save() -> None:
        writer.sync()  # the rows are on disk before the record says so
        record = {"key": key, "file": path.name, "shape": [n, d], "rows": writer.rows}
        atomic_write_text(progress, json.dumps(record) + "\n")

    if start:
        console.print(f"resuming the dense encoding of an interrupted build at row {start:,} of {n:,}")
        if on_progress is not None:
            on_progress(start)
    source = texts(start) if callable(texts) else itertools.islice(texts, start, None)
    last = time.monotonic()
    try:
        if key is not None:
            save()  # a fresh encoding replaces any older record at once
        for batch in _batches(source, chunk):
            if writer.rows + len(batch) > n:
                raise RuntimeError(f"expected {n} passages to encode, got more")
            writer.write(encode(batch))  # (C, D)
            if on_progress is not None:
                on_progress(len(batch))
            if key is not None and time.monotonic() - last >= SAVE_EVERY_S:
                save()
                last = time.monotonic()
        if writer.rows != n:
            raise RuntimeError(f"expected {n} passages to encode, got {writer.rows}")
    except BaseException:
        if key is not None:
            try:
                save()
            except OSError:  # a full disk: the next build re-encodes from the last record
                pass
        writer.stop()
        raise
    if key is not None:
        save()
    writer.close()
    return start


def _batches(texts: Iterable[str], size: int) -> Iterable[list[str]]:
    it = iter(texts)
    while batch := list(itertools.islice(it, size)):
        yield batch
