"""Index directories: build them from a corpus file, and load them back as a ``Retriever``.

An index directory describes itself::

    manifest.json      kind, corpus path + fingerprint, encoder, dimension, counts, options, creation time, version
    passages/          PassageStore (passages.jsonl + offsets.npy), read lazily through a memory map
    bm25/              bm25s arrays (.npy, loaded with mmap)          -- kind bm25 or hybrid
    dense/index.faiss  faiss inner-product index (opened memory-mapped) -- kind dense or hybrid
    dense/vectors.f16.npy  fp16 passage vectors for exact re-ranking   -- compressed (faiss factory) dense indexes

The manifest is written last and the directory is built under a temporary name then renamed, so a directory with a
manifest is always complete. Loading against a corpus file checks its fingerprint, so an index is never silently
served next to a corpus it was not built from.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

from searchrl import __version__
from searchrl.data.corpus import PassageStore, count_words, file_fingerprint, iter_passages, local_corpus
from searchrl.retrieval import dense as dense_backend
from searchrl.retrieval.bm25 import BM25Options, BM25Retriever, build_bm25
from searchrl.retrieval.dense import (
    DenseOptions,
    DenseRetriever,
    build_dense,
    write_vector_chunks,
    write_vectors,
)
from searchrl.retrieval.dense_build import PROGRESS_FILE, keep_resumable
from searchrl.retrieval.hybrid import HybridRetriever
from searchrl.retrieval.local import LocalRetriever
from searchrl.retrieval.onnx_encoder import ExportUnsupported, OnnxEncoder, export_encoder
from searchrl.utils import atomic_write_text, console, progress, source_digest, weights_fingerprint

FORMAT = "searchrl-index"
FORMAT_VERSION = 1
KINDS = ("bm25", "dense", "hybrid")
#: BM25 options an index built by an earlier version lacks in its manifest: how it was built
OLD_BM25 = {"split_cjk": False, "unicode_words": False}
IndexKind = Literal["bm25", "dense", "hybrid"]


class IndexMismatchError(ValueError):
    """The index was built from a different corpus (or by an incompatible version); the message names the fix."""


def _rebuild_hint(corpus: str | Path, kind: str, out: str | Path, force: bool = False) -> str:
    """The build to suggest, as a Python call and as a command; ``force`` where ``out`` already holds an index (a
    build refuses it otherwise)."""
    call = f"build_index({str(corpus)!r}, {kind!r}, {str(out)!r}" + (", overwrite=True)" if force else ")")
    command = f"searchrl index build --corpus {corpus} --kind {kind} --out {out}" + (" --force" if force else "")
    return f"`{call}` (`{command}`)"


def missing_index(path: str | Path, kind: str = "bm25") -> FileNotFoundError:
    """The one-line error for a path that holds no index, naming the build for it; a file given instead (e.g. the
    corpus) gets a build of that file into a directory beside it, never over it."""
    path = Path(path)
    if path.is_file():
        out = path.parent / f"{path.name.split('.')[0]}-{kind}"
        return FileNotFoundError(
            f"{path} is a file, not an index directory; build one from it with {_rebuild_hint(path, kind, out)}"
        )
    return FileNotFoundError(f"{path} holds no index; build it with {_rebuild_hint('FILE', kind, path)}")


def _restore_replaced(out: Path) -> None:
    """A forced rebuild stopped between its two renames leaves the old index at ``.NAME.old``: it is put back."""
    old = out.with_name(f".{out.name}.old")
    if not out.exists() and (old / "manifest.json").is_file():
        old.rename(out)


def _passage_texts(store: PassageStore, start: int = 0) -> Iterator[str]:
    """What gets indexed: title and text, as the corpus's ``contents`` held them, quoted titles included (from row
    ``start`` on): Search-R1's and FlashRAG's index builders encode that field as it is."""
    for i in range(start, len(store)):
        yield store[i].contents


def staging_dir(out: Path) -> Path:
    """Where :func:`build_index` builds ``out`` before moving it into place (a stopped dense build's vectors wait)."""
    return out.with_name(f".{out.name}.partial")


def build_index(
    corpus: str | Path,
    kind: IndexKind,
    out: str | Path,
    *,
    encoder: str = "minilm-l6-v2",
    batch_size: int = 64,
    stemmer: str | None = "english",
    stopwords: str | None = "en",
    k1: float = 0.9,
    b: float = 0.4,
    faiss: str = "flat",
    nlist: int | None = None,
    nprobe: int = 16,
    candidates: int = 100,
    refine_factor: int = 10,
    hnsw_m: int = 32,
    ef_search: int = 128,
    query_prefix: str | None = None,
    passage_prefix: str | None = None,
    normalize: bool | None = None,
    max_length: int | None = None,
    vectors: Any = None,
    query_encoder: Literal["onnx", "sentence-transformers"] | None = None,
    vectors_source: str | None = None,
    max_words: int | None = None,
    overwrite: bool = False,
) -> Path:
    """Build a ``kind`` index of ``corpus`` in the directory ``out`` and return ``out``.

    BM25 options: ``stemmer`` (PyStemmer language or None), ``stopwords`` (bm25s list name or None), ``k1``, ``b``.
    Dense options: ``encoder`` (alias, directory or HF id), ``batch_size``, ``faiss`` index type (flat, ivf, hnsw,
    or a faiss index_factory string such as ``OPQ64,IVF4096,PQ64`` for a compressed index whose top ``candidates``
    are re-ranked exactly, ``refine_factor`` times as many scanned first when the factory ends in a ``Refine(...)``
    stage; see ``searchrl.retrieval.compressed``) and its parameters;
    ``query_prefix`` / ``passage_prefix`` / ``normalize`` override what is inferred from the encoder's name.
    ``vectors``: precomputed passage embeddings (N, D) in corpus order, used instead of encoding; the manifest
    records ``"precomputed_vectors": true`` (benchmarks use this for synthetic indexes). For a compressed index it
    may also be a ``compressed.RowFile`` (vectors in a file, streamed in chunks); ``vectors_source`` says in the
    manifest where the vectors came from (``searchrl index convert`` records the faiss Flat file).
    ``query_encoder``: ``"onnx"`` exports the encoder to ``dense/query_encoder/`` for fast, torch-free serving
    (see ``searchrl.retrieval.onnx_encoder``); ``"sentence-transformers"`` serves with the reference path. Default:
    ONNX when the passages are encoded here and the encoder can be exported, else sentence-transformers.
    ``max_words``: passages longer than this are cut into chunks of that many words (ids ``<id>#<k>``), for corpora
    of whole documents; the manifest records it.

    The build happens in ``.<out>.partial`` beside ``out``, renamed to ``out`` when complete. Encoded passage vectors
    are recorded there as they are written: when a dense encoding is interrupted (an error, Ctrl-C, a lost
    machine), the same build run again (same corpus file, unchanged; same encoder options) skips the rows already
    encoded.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown index kind '{kind}'; use one of {', '.join(KINDS)}")
    if max_words is not None and (max_words < 1 or vectors is not None):
        raise ValueError("max_words must be at least 1, and cannot cut passages whose vectors are given")
    if query_encoder not in (None, "onnx", "sentence-transformers"):
        raise ValueError(f"unknown query encoder '{query_encoder}'; use onnx or sentence-transformers")
    corpus, out = local_corpus(corpus).resolve(), Path(out)
    _restore_replaced(out)
    if not corpus.is_file():
        what = f"corpus {corpus} is a directory" if corpus.is_dir() else f"corpus not found: {corpus}"
        raise FileNotFoundError(f"{what}; give a .jsonl, .tsv or .parquet passage file")
    if (out / "manifest.json").exists() and not overwrite:
        raise ValueError(
            f"{out} already holds an index; pass overwrite=True (--force) to replace it, or another out (--out)"
        )
    if out.exists() and not (out / "manifest.json").exists() and any(out.iterdir()):
        raise ValueError(f"{out} exists and is not an index directory; choose an empty or new out (--out)")
    # Validate options before the (possibly long) corpus pass.
    bm25_opts = BM25Options(k1=k1, b=b, stemmer=stemmer, stopwords=stopwords) if kind != "dense" else None
    dense_opts = None
    if kind != "bm25":
        dense_opts = DenseOptions.for_encoder(
            encoder,
            query_prefix=query_prefix,
            passage_prefix=passage_prefix,
            normalize=normalize,
            faiss=faiss,
            nlist=nlist,
            nprobe=nprobe,
            candidates=candidates,
            refine_factor=refine_factor,
            hnsw_m=hnsw_m,
            ef_search=ef_search,
            max_length=max_length,
        )

    staging = staging_dir(out)
    # What the encoded vectors depend on: an interrupted build's vectors are kept only for the same key. The index
    # type is not part of it, so a factory string that faiss refused once the encoding was done can be fixed.
    resume_key = None
    if dense_opts is not None and vectors is None:
        encoding = {k: getattr(dense_opts, k) for k in ("encoder", "passage_prefix", "normalize", "max_length")}
        encoding["weights"] = weights_fingerprint(dense_opts.encoder)  # a local encoder retrained in place
        encoding["texts"] = "contents as stored"  # quoted titles kept (older builds encoded them unquoted)
        resume_key = {"corpus": source_digest(corpus), "max_words": max_words, "encoding": encoding}
    resuming = resume_key is not None and staging.is_dir() and keep_resumable(staging / "dense", resume_key)
    _discard(staging, keep="dense" if resuming else None)
    staging.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    counts: dict[str, int] = {}
    with progress() as bar:
        task = bar.add_task("reading passages", total=None)

        def counted(it: Iterator[Any]) -> Iterator[Any]:
            for i, item in enumerate(it, 1):
                if i % 5000 == 0:
                    bar.update(task, completed=i)
                yield item

        try:  # a bad corpus (a repeated id, a non-UTF-8 line) leaves no half-written staging directory behind
            store = PassageStore.build(counted(iter_passages(corpus, max_words=max_words)), staging / "passages")
        except BaseException:
            _discard(staging, keep="dense" if resuming else None)  # an interrupted read keeps encoded vectors
            raise
        n = len(store)
        bar.update(task, completed=n, total=n)
        if n == 0:
            _discard(staging)
            raise ValueError(f"{corpus} holds no passages; check the file's format (see `searchrl data --help`)")
        counts["passages"] = n
        if max_words is None:
            _warn_long_passages(store)
        if bm25_opts is not None:
            task = bar.add_task("bm25: tokenising", total=n)
            stats = build_bm25(
                _passage_texts(store), staging / "bm25", bm25_opts, on_progress=lambda k: bar.advance(task, k)
            )
            counts["vocab"] = stats["vocab"]
        dimension = None
        if dense_opts is not None:
            dimension, dense_opts = _build_dense_part(
                store, staging / "dense", dense_opts, batch_size, vectors, query_encoder, bar, resume_key
            )
            (staging / "dense" / PROGRESS_FILE).unlink(missing_ok=True)
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "kind": kind,
        "corpus": {"path": str(corpus), "fingerprint": file_fingerprint(corpus), "bytes": corpus.stat().st_size},
        "counts": counts,
        "encoder": dense_opts.encoder if dense_opts else None,
        "dimension": dimension,
        "precomputed_vectors": vectors is not None and dense_opts is not None,
        "vectors_source": vectors_source,
        "max_words": max_words,
        "options": {
            "bm25": bm25_opts.to_dict() if bm25_opts else None,
            "dense": dense_opts.to_dict() if dense_opts else None,
        },
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "build_seconds": round(time.time() - t0, 2),
        "searchrl_version": __version__,
    }
    store.close()
    atomic_write_text(staging / "manifest.json", json.dumps(manifest, indent=2) + "\n").chmod(0o644)  # mkstemp: 0600
    out.parent.mkdir(parents=True, exist_ok=True)
    old = out.with_name(f".{out.name}.old")  # an index replaced (--force) is removed only once the new one is in place
    shutil.rmtree(old, ignore_errors=True)
    if out.exists():
        out.rename(old)
    staging.rename(out)
    shutil.rmtree(old, ignore_errors=True)
    return out


#: words past which a passage is a whole document: no recipe's observation (``rollout.max_obs_tokens``) shows it whole
LONG_PASSAGE_WORDS = 1000


def _warn_long_passages(store: PassageStore, sample: int = 1024) -> None:
    """Warn when the first ``sample`` passages hold whole documents, which a search shows only the head of."""
    seen = min(sample, len(store))
    long = sum(count_words(store[i].text) > LONG_PASSAGE_WORDS for i in range(seen))
    if long:
        console.print(
            f"[yellow]warning:[/] {long} of the first {seen} passages are longer than {LONG_PASSAGE_WORDS} words: "
            "a search shows the policy only their head, and a prompt of several may outrun the model's context; "
            "cut them into passages (index build --max-words 100; in a run: pipeline.<index stage>.args.max_words)"
        )


def _discard(staging: Path, keep: str | None = None) -> None:
    """Remove a staging directory, or all of it but its entry ``keep``."""
    if keep is None or not staging.is_dir():
        shutil.rmtree(staging, ignore_errors=True)
        return
    for child in staging.iterdir():
        if child.name != keep:
            shutil.rmtree(child) if child.is_dir() else child.unlink()


def _build_dense_part(
    store: PassageStore,
    directory: Path,
    options: Any,
    batch_size: int,
    vectors: Any,
    query_encoder: Any,
    bar,
    resume_key: dict[str, Any] | None = None,
) -> tuple[int, Any]:
    """Write ``index.faiss`` (and the exported query encoder); returns the dimension and the final options."""

    n = len(store)
    encoder = None
    if vectors is not None and hasattr(vectors, "chunks"):  # a RowFile: streamed, never loaded whole
        if not options.compressed:
            raise ValueError(
                "vectors from a file need a compressed index; pass a faiss factory string, e.g. "
                "faiss='OPQ64,IVF4096,PQ64'"
            )
        if len(vectors.shape) != 2 or vectors.shape[0] != n:
            raise ValueError(
                f"the vector file holds {vectors.shape[0]} vectors but the corpus has {n} passages; "
                "give the corpus the index was built from"
            )
        write_vector_chunks(vectors.chunks(), n, vectors.shape[1], directory, options)
        dimension = int(vectors.shape[1])
    elif vectors is not None:
        if not options.compressed:  # a compressed build streams the (possibly memory-mapped) array in chunks
            vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[0] != n:
            raise ValueError(f"vectors must be (N={n}, D); got shape {vectors.shape}")
        write_vectors(vectors, directory, options)
        dimension = int(vectors.shape[1])
    else:
        task = bar.add_task(f"dense: encoding ({options.encoder})", total=n)
        encoder = dense_backend.Encoder(options)  # looked up when called, so it can be swapped
        stats = build_dense(
            lambda start: _passage_texts(store, start),
            n,
            directory,
            options,
            batch_size=batch_size,
            encoder=encoder,
            on_progress=lambda k: bar.advance(task, k),
            resume_key=resume_key,
        )
        dimension = stats["dimension"]
    if query_encoder is None:
        query_encoder = "onnx" if vectors is None else "sentence-transformers"
    if query_encoder == "onnx":
        options = _export_query_encoder(store, directory, options, encoder, required=vectors is not None)
    else:
        options = replace(options, query_encoder="sentence-transformers")
    return dimension, options


def _export_query_encoder(store: PassageStore, directory: Path, options: Any, reference: Any, *, required: bool):
    """Export the encoder to ONNX and check it against ``reference`` (the sentence-transformers encoder) when given.

    An encoder that cannot be exported keeps sentence-transformers (with a note), unless ONNX was asked for.
    """

    target = directory / "query_encoder"
    try:
        export_encoder(options.encoder, target, max_length=options.max_length)
    except (ExportUnsupported, ImportError) as err:
        shutil.rmtree(target, ignore_errors=True)
        if required:
            raise ValueError(
                f"cannot export encoder '{options.encoder}' to ONNX ({err}); build with "
                "query_encoder='sentence-transformers'"
            ) from None
        console.log(f"note: queries will be encoded with sentence-transformers ({err})")
        return replace(options, query_encoder="sentence-transformers")
    options = replace(options, query_encoder="onnx")
    if reference is not None:  # the exported graph must agree with the reference on this corpus's own text
        sample = [p.contents for p in store.get_many(range(min(32, len(store))))]
        fast = OnnxEncoder(target, options).encode(sample, is_query=False)  # (S, D)
        ref = reference.encode(sample, is_query=False)  # (S, D)
        cos = (fast * ref).sum(1) / np.maximum(np.linalg.norm(fast, axis=1) * np.linalg.norm(ref, axis=1), 1e-12)
        if float(cos.min()) < 0.999:
            raise RuntimeError(f"exported encoder disagrees with sentence-transformers (min cosine {cos.min():.5f})")
    return options


def read_manifest(directory: str | Path) -> dict[str, Any]:
    """The manifest of an index directory; one-line errors when the directory is not a usable index."""
    directory = Path(directory)
    _restore_replaced(directory)
    if directory.is_file():  # e.g. the corpus given as --index: never suggest building over it
        raise missing_index(directory)
    if not directory.is_dir():
        raise FileNotFoundError(
            f"index directory not found: {directory}; build one with "
            f"{_rebuild_hint('CORPUS.jsonl', 'bm25', directory)}"
        )
    path = directory / "manifest.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"{directory} has no manifest.json: not a SearchRL index; build one into a new directory with "
            f"{_rebuild_hint('CORPUS.jsonl', 'bm25', 'NEW_DIR')}"
        )
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        raise ValueError(f"{path} is not valid JSON; rebuild the index") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or manifest.get("kind") not in KINDS:
        raise ValueError(f"{path} is not a SearchRL index manifest; rebuild the index")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise IndexMismatchError(
            f"{directory} uses index format {manifest.get('format_version')}, this SearchRL reads {FORMAT_VERSION}; "
            f"rebuild it with {_rebuild_hint(manifest['corpus']['path'], manifest['kind'], directory, force=True)}"
        )
    return manifest


def check_corpus(manifest: dict[str, Any], corpus: str | Path, directory: str | Path) -> None:
    """Refuse an index built from a different corpus than ``corpus`` (compared by fingerprint, not by path)."""
    corpus = local_corpus(corpus)
    if not corpus.is_file():
        raise FileNotFoundError(f"corpus not found: {corpus}")
    built = manifest["corpus"]
    actual = file_fingerprint(corpus)
    if actual != built["fingerprint"]:
        raise IndexMismatchError(
            f"index {directory} was built from {built['path']} (fingerprint {built['fingerprint']}), but corpus "
            f"{corpus} has fingerprint {actual}; "
            f"rebuild with {_rebuild_hint(corpus, manifest['kind'], directory, force=True)}"
        )


#: search settings of a dense index that ``load_index`` may override, and the index types that have them.
SEARCH_SETTINGS = {"nprobe": "ivf or IVF factory", "ef_search": "hnsw", "candidates": "factory (compressed)"}


def _search_settings(options: DenseOptions, overrides: dict[str, int | None]) -> DenseOptions:
    """``options`` with the given search settings replaced; a note for one the index type does not use."""
    given = {k: v for k, v in overrides.items() if v is not None}
    for name, value in given.items():
        if value < 1:
            raise ValueError(f"{name} must be at least 1 (got {value})")
        factory_ivf = options.compressed and "IVF" in options.faiss
        used = {
            "nprobe": options.faiss == "ivf" or factory_ivf,
            "ef_search": options.faiss == "hnsw",
            "candidates": options.compressed,
        }[name]
        if not used:
            console.print(f"note: {name} applies to {SEARCH_SETTINGS[name]} indexes, not '{options.faiss}'; ignored")
    return replace(options, **given)


def load_index(
    directory: str | Path,
    corpus: str | Path | None = None,
    *,
    query_encoder: str | None = None,
    nprobe: int | None = None,
    ef_search: int | None = None,
    candidates: int | None = None,
) -> LocalRetriever:
    """Open an index directory as a retriever (fast: arrays and vectors are memory-mapped, text is read lazily).

    When ``corpus`` is given, the index must have been built from a file with the same fingerprint.
    ``query_encoder`` (``"onnx"`` / ``"sentence-transformers"``) overrides the manifest's choice for dense parts;
    ``nprobe`` (ivf), ``ef_search`` (hnsw) and ``candidates`` (compressed) override the search settings recorded
    at build time, trading recall for speed without a rebuild. The retriever's manifest shows the values in use.
    """
    directory = Path(directory)
    manifest = read_manifest(directory)
    if corpus is not None:
        check_corpus(manifest, corpus, directory)
    kind = manifest["kind"]
    if manifest.get("precomputed_vectors") and not manifest.get("vectors_source"):
        console.log(f"note: {directory} holds precomputed passage vectors (not produced by {manifest['encoder']})")
    sparse = dense = None
    try:
        store = PassageStore(directory / "passages")
        if kind in ("bm25", "hybrid"):
            sparse = BM25Retriever.load(
                directory / "bm25", store, BM25Options(**{**OLD_BM25, **manifest["options"]["bm25"]}), manifest
            )
        if kind in ("dense", "hybrid"):
            options = DenseOptions(**manifest["options"]["dense"])
            overrides = {"nprobe": nprobe, "ef_search": ef_search, "candidates": candidates}
            if any(v is not None for v in overrides.values()):
                options = _search_settings(options, overrides)
                manifest["options"]["dense"] = options.to_dict()
            dense = DenseRetriever.load(directory / "dense", store, options, manifest, query_encoder=query_encoder)
    except FileNotFoundError as err:  # a file of the index removed or never written
        missing = Path(err.filename).name if err.filename else str(err)
        raise FileNotFoundError(
            f"index {directory} is incomplete ({missing} is missing); rebuild it with "
            f"{_rebuild_hint(manifest['corpus']['path'], kind, directory, force=True)}"
        ) from None
    if kind == "bm25":
        if any(v is not None for v in (nprobe, ef_search, candidates)):
            console.print("note: nprobe, ef_search and candidates apply to dense indexes; ignored for bm25")
        return sparse  # type: ignore[return-value]
    if kind == "dense":
        return dense  # type: ignore[return-value]
    return HybridRetriever(sparse, dense, manifest=manifest)  # type: ignore[arg-type]
