"""Compressed dense indexes: a faiss ``index_factory`` index proposes candidates, exact inner products re-rank them.

A Wikipedia-scale flat index (21M passages x 768-d float32 = 64 GB) does not fit a single machine's RAM. A
compressed index (IVF-PQ, OPQ+IVF-PQ, ... any faiss factory string) keeps a few dozen bytes per passage; its
approximate scores pick the top ``candidates`` passages of each query, which are then re-scored exactly with their
full vectors, so the final order is the exact inner-product order of those candidates. On disk (``dense/``)::

    index.faiss        the compressed index; inverted lists are memory-mapped (fast-scan ``x4fs`` lists: in RAM)
    vectors.f16.npy    (N, D) float16 passage vectors (a plain .npy file); only the candidates' rows are read

Building streams: vectors go to ``vectors.f16.npy`` in chunks, k-means and PQ are trained on a sample of rows,
and vectors are added to the index chunk by chunk, so RAM is bounded by the sample and one chunk, never by N.
Building reads the vector file through short-lived memory maps of one window of rows, and re-ranking reads the
candidates' rows by position (``RowReader``), so the pages read stay in the kernel's page cache, not in the
process's resident memory, even for files larger than RAM.
"""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

VECTORS_FILE = "vectors.f16.npy"
#: values per streamed chunk: 16M float32 = 64 MB (21,845 rows of 768-d).
CHUNK_VALUES = 1 << 24


def chunk_rows(d: int) -> int:
    return max(1, CHUNK_VALUES // d)


def faiss_error(factory: str, err: Exception) -> ValueError:
    return ValueError(
        f"faiss cannot build '{factory}' ({str(err).strip().splitlines()[-1][:160]}); give a faiss "
        "index_factory string such as 'IVF1024,PQ64' or 'OPQ64,IVF4096,PQ64' (PQ's M must divide "
        "the dimension)"
    )


# ---------------------------------------------------------------------------------------------- vector files
def npy_header(n: int, d: int, dtype: str = "<f2") -> bytes:
    """The ``.npy`` header of a C-ordered (N, D) array of ``dtype``."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": np.dtype(dtype).str, "fortran_order": False, "shape": (n, d)})
    return buf.getvalue()


class VectorWriter:
    """Write an (N, D) matrix file from row chunks, without holding the array: a float16 ``.npy`` file by default,
    or rows of any ``dtype`` after any fixed ``header`` (a faiss Flat index file is a header and float32 rows).

    ``start``: continue a file this writer began, after its first ``start`` rows (an interrupted build). Its header
    must be the same, and what follows those rows is dropped; otherwise ``ValueError``.
    """

    def __init__(
        self, path: str | Path, n: int, d: int, *, dtype: str = "<f2", header: bytes | None = None, start: int = 0
    ) -> None:
        self.path, self.n, self.d, self.dtype = Path(path), n, d, np.dtype(dtype)
        self.header = npy_header(n, d, self.dtype.str) if header is None else header
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if start:
            end = len(self.header) + start * d * self.dtype.itemsize
            self._f = self.path.open("r+b")
            if not 0 < start <= n or self._f.read(len(self.header)) != self.header or self._size() < end:
                self._f.close()
                raise ValueError(f"{self.path} does not hold the first {start} of its {n} rows; cannot resume it")
            self._f.truncate(end)
            self._f.seek(end)
        else:
            self._f = self.path.open("wb")
            self._f.write(self.header)
        self.rows = start

    def _size(self) -> int:
        return os.fstat(self._f.fileno()).st_size

    def write(self, chunk: np.ndarray) -> None:
        chunk = np.asarray(chunk)
        if chunk.ndim != 2 or chunk.shape[1] != self.d:
            raise ValueError(f"vector chunk has shape {chunk.shape}; expected (rows, {self.d})")
        if self.rows + len(chunk) > self.n:
            raise ValueError(f"more than the {self.n} announced vectors were written")
        self._f.write(np.ascontiguousarray(chunk, dtype=self.dtype).data)  # the array's buffer, not a copy
        self.rows += len(chunk)

    def sync(self) -> None:
        """Make the rows written so far durable (before recording how many there are)."""
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> Path:
        self._f.close()
        if self.rows != self.n:
            raise RuntimeError(f"{self.path}: expected {self.n} vectors, got {self.rows}")
        return self.path

    def __enter__(self) -> VectorWriter:
        return self

    def stop(self) -> None:
        """Close the file with fewer rows than announced (a build that failed or was interrupted)."""
        self._f.close()

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.close()
        else:
            self.stop()


class RowFile:
    """A row-major matrix stored at ``offset`` in a file, read one window of rows at a time."""

    def __init__(self, path: str | Path, offset: int, shape: tuple[int, int], dtype: str) -> None:
        self.path, self.offset, self.shape, self.dtype = Path(path), offset, shape, np.dtype(dtype)
        expected = offset + shape[0] * shape[1] * self.dtype.itemsize
        if self.path.stat().st_size < expected:
            raise ValueError(f"{self.path} is truncated: {self.path.stat().st_size} bytes, expected {expected}")

    @classmethod
    def npy(cls, path: str | Path) -> RowFile:
        """A 2-d ``.npy`` file (such as ``vectors.f16.npy``)."""
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, fortran, dtype = read(f)
            offset = f.tell()
        if len(shape) != 2 or fortran:
            raise ValueError(f"{path} is not a C-ordered (N, D) matrix; rebuild the index")
        return cls(path, offset, (int(shape[0]), int(shape[1])), dtype.str)

    def window(self, start: int, stop: int) -> np.ndarray:
        """Rows ``[start, stop)`` as float32 (a copy; the map is closed before returning)."""
        mm = np.memmap(
            self.path,
            self.dtype,
            "r",
            self.offset + start * self.shape[1] * self.dtype.itemsize,
            (stop - start, self.shape[1]),
        )
        out = np.array(mm, dtype=np.float32)
        del mm
        return out

    def chunks(self, rows: int | None = None) -> Iterator[np.ndarray]:
        rows = rows or chunk_rows(self.shape[1])
        for start in range(0, self.shape[0], rows):
            yield self.window(start, min(start + rows, self.shape[0]))

    def sample(self, size: int, seed: int = 0) -> np.ndarray:
        """``size`` distinct random rows as (size, D) float32, read window by window."""
        n = self.shape[0]
        if size >= n:
            return np.concatenate(list(self.chunks()))
        picked = np.sort(np.random.default_rng(seed).choice(n, size, replace=False))
        out = np.empty((size, self.shape[1]), dtype=np.float32)
        done, step = 0, chunk_rows(self.shape[1])
        for start in range(0, n, step):
            lo, hi = np.searchsorted(picked, [start, start + step])
            if hi > lo:
                out[done : done + hi - lo] = self.window(start, min(start + step, n))[picked[lo:hi] - start]
                done += hi - lo
        return out


def write_vector_file(chunks: Iterable[np.ndarray], n: int, d: int, path: str | Path) -> Path:
    """Stream ``chunks`` of (rows, D) vectors into an fp16 ``.npy`` file of N rows."""
    with VectorWriter(path, n, d) as writer:
        for chunk in chunks:
            writer.write(chunk)
    return Path(path)


# ---------------------------------------------------------------------------------------------------- build
def make_factory_index(d: int, factory: str) -> Any:
    """An untrained inner-product faiss index from a factory string; one-line error when faiss refuses it."""
    import faiss

    try:
        return faiss.index_factory(d, factory, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as err:
        raise faiss_error(factory, err) from None


def _ivf(index: Any) -> Any | None:
    import faiss

    try:
        return faiss.extract_index_ivf(index)
    except RuntimeError:
        return None


def _fast_scan_ivf(index: Any) -> Any | None:
    """The ``IndexIVFFastScan`` inside ``index`` (4-bit ``x4fs`` codes), or None."""
    import faiss

    ivf = _ivf(index)
    ivf = faiss.downcast_index(ivf) if ivf is not None else None
    return ivf if ivf is not None and hasattr(ivf, "search_implem_14") else None


def _refine_stage(index: Any) -> Any | None:
    """``index`` as a faiss ``IndexRefine`` (factory ``...,Refine(...)``), or None."""
    import faiss

    refine = faiss.downcast_index(index) if isinstance(index, faiss.Index) else None
    return refine if isinstance(refine, faiss.IndexRefine) else None


def probe_parallel_implem(k: int) -> int:
    """faiss' fast-scan implementation that spreads one query's probed lists over threads, for a top ``k``: 14
    keeps each thread's results in a heap, 15 in a reservoir, which faiss' own default prefers beyond 20."""
    return 15 if k > 20 else 14


def disable_polysemous_training(index: Any) -> None:
    """Skip faiss' polysemous training of PQ codes (on by default for factory ``IVF...,PQ...`` indexes).

    Polysemous training re-orders each sub-quantizer's centroids by simulated annealing so that Hamming distances
    between codes approximate PQ distances; only polysemous search (``polysemous_ht``) uses it, which a
    ``RerankedIndex`` never sets. For 768-d ``PQ96`` it costs minutes of CPU per sub-quantizer group (the training
    of ``IVF512,PQ96`` on 32,768 vectors did not finish in 4 minutes here, against under a minute without it).
    """
    import faiss

    ivf = _ivf(index)
    target = faiss.downcast_index(ivf) if ivf is not None else faiss.downcast_index(index)
    if hasattr(target, "do_polysemous_training"):
        target.do_polysemous_training = False


def default_train_size(index: Any, n: int) -> int:
    """Enough rows for k-means (64 per inverted list) and PQ codebooks (about 10,000), at most N."""
    ivf = _ivf(index)
    nlist = int(ivf.nlist) if ivf is not None else 0
    return min(n, max(64 * nlist, 20_000))


def build_compressed(
    vectors_path: str | Path, out: str | Path, factory: str, *, train_size: int | None = None, seed: int = 0
) -> dict[str, Any]:
    """Train ``factory`` on a sample of ``vectors_path``'s rows, add all rows in chunks, write ``out``.

    Returns what it did: ``{"train_rows", "nlist", "code_bytes"}``.
    """
    import faiss

    source = RowFile.npy(vectors_path)
    n, d = source.shape
    index = make_factory_index(d, factory)
    ivf = _ivf(index)
    if ivf is not None and n < ivf.nlist:
        raise ValueError(
            f"'{factory}' asks for {ivf.nlist} inverted lists but there are only {n} passages; use "
            f"fewer lists, e.g. IVF{max(1, min(int(4 * np.sqrt(n)), n // 39))}"
        )
    disable_polysemous_training(index)
    size = train_size or default_train_size(index, n)
    sample = source.sample(size, seed)
    try:
        index.train(sample)
    except RuntimeError as err:
        raise faiss_error(factory, err) from None
    del sample
    for chunk in source.chunks():
        index.add(chunk)
    faiss.write_index(index, str(out))
    code_bytes = int(getattr(ivf, "code_size", 0)) if ivf is not None else 0
    return {"train_rows": size, "nlist": int(ivf.nlist) if ivf is not None else 0, "code_bytes": code_bytes}


# ---------------------------------------------------------------------------------------------------- search
class RowReader:
    """Rows of an (N, D) ``.npy`` matrix read by position (``os.preadv``), without memory-mapping the file.

    Re-ranking reads a few hundred scattered rows per query from a multi-GB vector file. Positional reads copy
    just those rows out of the kernel's page cache: the file's pages stay shared and reclaimable there (a repeated
    read costs no disk access) and never count in the server's resident memory, however widely queries spread
    over the file. A memory map unmapped after each gather (``MADV_DONTNEED``) keeps RSS as small but faults every
    page in again: for 1,000 scattered rows of a cached 7.15 GB vector file it took 18.7 ms against 7.8 ms here
    (about even on a 0.43 GB file; ``benchmarks/results/retrieval_gather.md``). Thread-safe: reads carry their
    own offsets.
    """

    def __init__(self, path: str | Path) -> None:
        self.file = RowFile.npy(path)  # path, shape, dtype and the offset of row 0
        self.shape = self.file.shape
        self.row_bytes = self.shape[1] * self.file.dtype.itemsize
        self._fd = os.open(self.file.path, os.O_RDONLY | getattr(os, "O_BINARY", 0))  # Windows: not text mode

    def take(self, rows: np.ndarray) -> np.ndarray:
        """Rows ``rows`` (sorted, distinct) as (R, D) float32, one positional read per row."""
        rows = np.asarray(rows, dtype=np.int64)
        out = np.empty((len(rows), self.shape[1]), dtype=self.file.dtype)
        if len(rows) and (rows[0] < 0 or rows[-1] >= self.shape[0]):
            raise IndexError(f"row out of range for {self.file.path} with {self.shape[0]} rows")
        view, size = memoryview(out.reshape(-1).view(np.uint8)), self.row_bytes
        offsets = (self.file.offset + rows * size).tolist()
        if hasattr(os, "preadv"):  # the hot loop: a few microseconds a row
            fd, preadv = self._fd, os.preadv
            done = sum(preadv(fd, [view[j * size : (j + 1) * size]], at) for j, at in enumerate(offsets))
        else:
            done = sum(_read_at(self._fd, view[j * size : (j + 1) * size], at) for j, at in enumerate(offsets))
        if done != len(view):
            raise OSError(
                f"{self.file.path}: read {done} of {len(view)} bytes; the vector file is truncated, rebuild it"
            )
        return out.astype(np.float32)

    def close(self) -> None:
        if getattr(self, "_fd", -1) >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        self.close()


def _read_at(fd: int, buf: memoryview, offset: int) -> int:
    """Fill ``buf`` from ``fd`` at ``offset`` where ``os.preadv`` is missing (Windows): a locked seek + read."""
    with _SEEK_LOCK:
        os.lseek(fd, offset, os.SEEK_SET)
        data = os.read(fd, len(buf))
    buf[: len(data)] = data
    return len(data)


_SEEK_LOCK = threading.Lock()


class RerankedIndex:
    """Looks like a faiss index (``d``, ``ntotal``, ``search``): approximate candidates, exact re-ranking.

    ``search(q, k)`` asks the compressed index for ``max(k, candidates)`` rows per query, reads those rows' fp16
    vectors (one gather for the whole batch) and returns the top ``k`` by exact inner product, equal scores in row
    order.
    """

    def __init__(self, index: Any, vectors: np.ndarray | RowReader, *, candidates: int = 100) -> None:
        if vectors.shape != (index.ntotal, index.d):
            raise ValueError(
                f"{VECTORS_FILE} holds {vectors.shape} vectors but the index has "
                f"({index.ntotal}, {index.d}); rebuild the index"
            )
        if candidates < 1:
            raise ValueError(f"candidates must be >= 1 (got {candidates})")
        self.index = index
        self.vectors = vectors
        self.candidates = candidates
        self.d = int(index.d)
        self.ntotal = int(index.ntotal)
        self._fast_scan = _fast_scan_ivf(index)
        self._refine = _refine_stage(index)

    @classmethod
    def open(cls, directory: str | Path, *, nprobe: int, candidates: int, refine_factor: int = 10) -> RerankedIndex:
        """Open ``directory/index.faiss`` (inverted lists memory-mapped) and its ``vectors.f16.npy``.

        An index with a refining stage (factory ``...,Refine(PQ192)``) scans its coarse codes for ``candidates *
        refine_factor`` passages and keeps the ``candidates`` best by its finer in-RAM codes; only those are read
        from the vector file for the exact re-ranking."""
        import faiss

        directory = Path(directory)
        if not (directory / VECTORS_FILE).is_file():
            raise FileNotFoundError(f"{directory} has no {VECTORS_FILE} for exact re-ranking; rebuild the index")
        index = faiss.read_index(str(directory / "index.faiss"), faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY)
        if _ivf(index) is not None:
            faiss.ParameterSpace().set_index_parameter(index, "nprobe", nprobe)
        if _refine_stage(index) is not None:
            faiss.ParameterSpace().set_index_parameter(index, "k_factor_rf", refine_factor)
        return cls(index, RowReader(directory / VECTORS_FILE), candidates=candidates)

    def search(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(Q, k) scores and rows, best first; rows -1 (score -inf) where fewer than k candidates were found."""
        q = np.ascontiguousarray(q, dtype=np.float32)  # (Q, D)
        pool = min(max(k, self.candidates), self.ntotal)
        if self._fast_scan is not None:
            import faiss

            # faiss' default fast-scan search spreads the queries over threads, so one query runs on one core;
            # implementation 14 spreads the probed lists instead: 7.4 ms against 13.2 ms for one query on 2
            # threads (5M x 768-d, IVF2048,PQ192x4fs, nprobe 256; benchmarks/results/retrieval_single_query.md).
            # On one thread it was slower (same file); a batch with a query per thread already keeps every thread
            # busy with the default. Either implementation returns the same hits. Like faiss' default, it keeps
            # each thread's best in a heap for a few candidates and in a reservoir for more (15: k > 20).
            threads = faiss.omp_get_max_threads()
            scanned = pool * int(self._refine.k_factor) if self._refine is not None else pool
            self._fast_scan.implem = probe_parallel_implem(scanned) if 1 < threads and len(q) < threads else 0
        _, cand = self.index.search(q, pool)  # (Q, pool)
        rows = np.unique(cand[cand >= 0])  # sorted: the gather reads the file front to back
        if isinstance(self.vectors, RowReader):
            vecs = self.vectors.take(rows)  # (R, D)
        else:
            vecs = np.asarray(self.vectors[rows], dtype=np.float32)
        scores_out = np.full((len(q), k), -np.inf, dtype=np.float32)
        rows_out = np.full((len(q), k), -1, dtype=np.int64)
        for i, c in enumerate(cand):
            c = c[c >= 0]
            if not len(c):
                continue
            exact = vecs[np.searchsorted(rows, c)] @ q[i]  # (C,)
            top = np.lexsort((c, -exact))[:k]  # exact ties by row, as the flat and BM25 indexes break them
            scores_out[i, : len(top)] = exact[top]
            rows_out[i, : len(top)] = c[top]
        return scores_out, rows_out
