"""``searchrl index convert``: a Search-R1 style faiss Flat index (e.g. ``e5_Flat.index``) -> a compressed index.

Search-R1 and FlashRAG ship their dense index as a faiss ``IndexFlatIP`` file: 21M x 768 float32, 64 GB. Reading it
with ``faiss.read_index`` needs all of it in RAM. Instead we read the file's header and stream its vector block
through short-lived memory maps: the vectors become ``dense/vectors.f16.npy`` (fp16, for exact re-ranking) and a
compressed faiss index (``OPQ64,IVF...,PQ64`` by default) trained on a sample, so peak memory is the training sample
plus one chunk, not the file.

The Flat file layout (faiss ``write_index`` for ``IndexFlat``; the same since faiss 1.5)::

    fourcc "IxFI" (inner product) | "IxF2" (L2) | "IxFl"
    int32 d, int64 ntotal, int64 dummy, int64 dummy, uint8 is_trained, int32 metric_type, [float32 metric_arg]
    uint64 n_floats (= ntotal * d), then n_floats float32 values, row-major
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from searchrl.retrieval.compressed import RowFile
from searchrl.retrieval.index import build_index

_FLAT_FOURCCS = (b"IxFI", b"IxF2", b"IxFl")
METRIC_INNER_PRODUCT = 0


def read_flat_file(path: str | Path) -> RowFile:
    """The vector block of a faiss ``IndexFlatIP`` file as a ``RowFile`` (nothing but the header is read).

    One-line errors for files that are not an inner-product Flat index, or are truncated.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"faiss index file not found: {path} (give a Flat index such as e5_Flat.index)")
    with path.open("rb") as f:
        head = f.read(4 + 4 + 8 + 8 + 8 + 1 + 4 + 4 + 8)
    fourcc = head[:4]
    if fourcc not in _FLAT_FOURCCS:
        raise ValueError(
            f"{path} is not a faiss Flat index (file starts with {fourcc!r}); convert reads "
            "IndexFlatIP files such as Search-R1's e5_Flat.index"
        )
    d, ntotal, _, _, _, metric = struct.unpack_from("<iqqq?i", head, 4)
    offset = 4 + struct.calcsize("<iqqq?i")
    if metric > 1:  # metric_arg follows for metrics other than inner product and L2
        offset += 4
    if metric != METRIC_INNER_PRODUCT:
        scoring = "L2" if metric == 1 else f"metric {metric}"
        raise ValueError(
            f"{path} scores by {scoring}, not inner product; convert only IndexFlatIP files (what "
            "Search-R1 and FlashRAG ship)"
        )
    (n_floats,) = struct.unpack_from("<Q", head, offset)
    offset += 8
    if d <= 0 or ntotal < 0 or n_floats != ntotal * d:
        raise ValueError(f"{path}: header says {ntotal} x {d} vectors but {n_floats} values; the file is damaged")
    expected = offset + 4 * n_floats
    if path.stat().st_size != expected:
        raise ValueError(
            f"{path} has {path.stat().st_size} bytes, expected {expected} for {ntotal} x {d} "
            "float32 vectors; the file is truncated or not a plain Flat index"
        )
    return RowFile(path, offset, (int(ntotal), int(d)), "<f4")


def default_factory(n: int, d: int) -> str:
    """``OPQ{m},IVF{nlist},PQ{m}``: m sub-quantisers of about 12 dimensions (dividing d), ~4 sqrt(N) lists.

    >>> default_factory(21_000_000, 768)
    'OPQ64,IVF16384,PQ64'
    >>> default_factory(5_000, 384)
    'OPQ32,IVF128,PQ32'
    """
    m = max(k for k in range(1, max(1, d // 12) + 1) if d % k == 0)
    nlist = 1 << int(np.log2(max(1.0, 4 * np.sqrt(n))))  # a power of two at most 4 sqrt(N)
    nlist = max(1, min(nlist, n // 39))  # faiss wants >= 39 training points per list
    return f"OPQ{m},IVF{nlist},PQ{m}"


def convert_flat_index(
    flat: str | Path,
    corpus: str | Path,
    out: str | Path,
    *,
    encoder: str = "intfloat/e5-base-v2",
    faiss: str | None = None,
    nprobe: int = 64,
    candidates: int = 100,
    refine_factor: int = 10,
    overwrite: bool = False,
) -> Path:
    """Write a compressed dense index directory ``out`` from a Flat index file and the corpus it was built from.

    ``encoder`` is the model that produced the Flat file's vectors (Search-R1: ``intfloat/e5-base-v2``); queries
    will be encoded with it and its prefixes. ``faiss``: factory string (default: ``default_factory(N, D)``).
    """
    source = read_flat_file(flat)
    factory = faiss or default_factory(*source.shape)
    return build_index(
        corpus,
        "dense",
        out,
        encoder=encoder,
        faiss=factory,
        nprobe=nprobe,
        candidates=candidates,
        refine_factor=refine_factor,
        vectors=source,
        vectors_source=f"faiss Flat file {Path(flat).resolve()}",
        query_encoder="sentence-transformers",
        overwrite=overwrite,
    )
