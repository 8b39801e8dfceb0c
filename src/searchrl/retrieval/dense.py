"""Dense retrieval: a sentence-transformers encoder and a faiss inner-product index.

Encoders are addressed like every model in SearchRL (an alias such as ``minilm-l6-v2``, a local directory or an HF
id, resolved by ``searchrl.models``). Pooling comes from the model's own sentence-transformers config (mean for
E5 and MiniLM, CLS for BGE). What the config does not carry is the query/passage text convention, which we infer
from the name, as Search-R1's and FlashRAG's retrieval servers do:

- E5 (``intfloat/e5-*``): ``"query: "`` before queries, ``"passage: "`` before passages;
- BGE (``BAAI/bge-*``): the instruction ``"Represent this sentence for searching relevant passages: "`` before
  queries only (the Chinese models, ``bge-*-zh*``, their Chinese one; BGE-M3 none);
- anything else (MiniLM, MPNet, ...): no prefix.

Embeddings are L2-normalised (so inner product = cosine), except for DPR-style encoders trained for raw inner
product (a DPR model in sentence-transformers' format; the original question and context encoder pair is refused).
All of it can be overridden at build time and is recorded in the index manifest, so queries are always encoded the
way the passages were.

Index types: exact inner product (``flat``, the default, what Search-R1 ships), ``ivf`` (inverted lists), ``hnsw``
(graph), or any faiss ``index_factory`` string such as ``OPQ64,IVF4096,PQ64``: a compressed index whose top
``candidates`` are re-ranked exactly with fp16 vectors read from disk (``searchrl.retrieval.compressed``). Index
files are opened memory-mapped, so a large index starts without reading its vectors.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from searchrl import models
from searchrl.data.corpus import PassageStore
from searchrl.retrieval.cache import LRUCache
from searchrl.retrieval.compressed import (
    VECTORS_FILE,
    RerankedIndex,
    RowFile,
    build_compressed,
    chunk_rows,
    write_vector_file,
)
from searchrl.retrieval.dense_build import Texts, empty_faiss_index, encode_to_file, index_from_rows, vector_target
from searchrl.retrieval.local import LocalRetriever, Ranking
from searchrl.retrieval.onnx_encoder import OnnxEncoder
from searchrl.utils import console

FAISS_KINDS = ("flat", "ivf", "hnsw")
#: how queries are encoded when serving: the exported ONNX graph (``onnx_encoder``) or sentence-transformers.
QUERY_ENCODERS = ("onnx", "sentence-transformers")
#: what a faiss index_factory string looks like (``IVF4096,PQ64``, ``OPQ64_256,IVF16384_HNSW32,PQ64x8``).
FACTORY_RE = re.compile(r"[A-Za-z0-9_,.=()\-]*[A-Z][A-Za-z0-9_,.=()\-]*")
BGE_QUERY_INSTRUCTION = "Represent this sentence for searching relevant passages: "
#: the Chinese BGE models' query instruction (their model card; FlashRAG's ``set_default_instruction``)
BGE_ZH_QUERY_INSTRUCTION = "为这个句子生成表示以用于检索相关文章："


@dataclass(frozen=True)
class EncoderProfile:
    """How texts are prepared and embeddings post-processed for one encoder."""

    query_prefix: str = ""
    passage_prefix: str = ""
    normalize: bool = True


def encoder_profile(name: str) -> EncoderProfile:
    """Infer the query/passage convention from an encoder's name (alias, path or HF id).

    >>> encoder_profile("intfloat/e5-base-v2").query_prefix
    'query: '
    >>> encoder_profile("BAAI/bge-large-en-v1.5").passage_prefix
    ''
    >>> encoder_profile("minilm-l6-v2")
    EncoderProfile(query_prefix='', passage_prefix='', normalize=True)
    """
    base = name.rstrip("/").lower()
    # Match whole name parts, so a directory that merely contains "e5" in a hash is not mistaken for E5.
    parts = set(re.split(r"[/_\-.]", base))
    if "e5" in parts:
        return EncoderProfile("query: ", "passage: ", True)
    if "bge" in parts and "m3" not in parts:  # BGE-M3 was trained without the instruction
        return EncoderProfile(BGE_ZH_QUERY_INSTRUCTION if "zh" in parts else BGE_QUERY_INSTRUCTION, "", True)
    if "dpr" in parts:
        return EncoderProfile("", "", False)
    return EncoderProfile("", "", True)


@dataclass(frozen=True)
class DenseOptions:
    """Everything needed to encode queries like the passages were encoded; stored in the manifest."""

    encoder: str = "minilm-l6-v2"
    query_prefix: str = ""
    passage_prefix: str = ""
    normalize: bool = True
    #: flat, ivf, hnsw, or a faiss index_factory string (a compressed index with exact re-ranking).
    faiss: str = "flat"
    #: IVF: number of inverted lists (None = about 4 * sqrt(N)) and lists probed per query (also for factory IVF).
    nlist: int | None = None
    nprobe: int = 16
    #: factory indexes: passages per query re-ranked exactly with their full vectors.
    candidates: int = 100
    #: factory indexes with a refining stage (``IVF2048,PQ192x4fs,Refine(PQ192)``): the scan of the compressed
    #: codes returns ``candidates * refine_factor`` passages, which the finer in-RAM codes cut to ``candidates``.
    refine_factor: int = 10
    #: HNSW: neighbours per node and search breadth.
    hnsw_m: int = 32
    ef_search: int = 128
    #: passages longer than this many encoder tokens are truncated (None = the model's own limit).
    max_length: int | None = None
    #: "onnx" when the index holds an exported query encoder (``dense/query_encoder/``); older indexes lack it.
    query_encoder: str = "sentence-transformers"

    def __post_init__(self) -> None:
        if self.faiss not in FAISS_KINDS and not FACTORY_RE.fullmatch(self.faiss):
            raise ValueError(
                f"unknown faiss index type '{self.faiss}'; use one of {', '.join(FAISS_KINDS)} or a "
                "faiss index_factory string such as 'OPQ64,IVF4096,PQ64'"
            )
        if self.candidates < 1 or self.nprobe < 1 or self.refine_factor < 1:
            raise ValueError(
                "candidates, nprobe and refine_factor must be >= 1 "
                f"(got {self.candidates}, {self.nprobe}, {self.refine_factor})"
            )
        if self.query_encoder not in QUERY_ENCODERS:
            raise ValueError(f"unknown query encoder '{self.query_encoder}'; use one of {', '.join(QUERY_ENCODERS)}")

    @classmethod
    def for_encoder(cls, encoder: str, **overrides: Any) -> DenseOptions:
        """Options with the encoder's inferred profile; explicit ``overrides`` (non-None) win."""
        profile = encoder_profile(encoder)
        fields = {"query_prefix": profile.query_prefix, "passage_prefix": profile.passage_prefix}
        fields["normalize"] = profile.normalize
        fields.update({k: v for k, v in overrides.items() if v is not None})
        return cls(encoder=encoder, **fields)

    @property
    def compressed(self) -> bool:
        """A faiss factory index with exact re-ranking (rather than flat / ivf / hnsw)."""
        return self.faiss not in FAISS_KINDS

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Encoder:
    """A sentence-transformers model plus its text convention. ``encode`` is one batched forward pass per call."""

    def __init__(self, options: DenseOptions, device: str | None = None) -> None:
        self.options = options
        self.model = models.load_embedder(options.encoder, device=device)
        if options.max_length is not None:
            self.model.max_seq_length = options.max_length
        # sentence-transformers 5 renamed the dimension getter; keep working with both.
        get_dim = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        self.dimension = int(get_dim() or 0)
        # An original DPR encoder (transformers' DPRQuestionEncoder / DPRContextEncoder) loads with no text modality
        # (dimension 0); older sentence-transformers wrap it in mean pooling that fails at the first encode.
        is_dpr = any(type(m).__name__.startswith("DPR") for m in getattr(self.model, "modules", tuple)())
        if not self.dimension or is_dpr:
            dpr = " (DPR's question and context encoders are two models, which SearchRL does not pair)"
            raise ValueError(
                f"{options.encoder} is not a sentence-transformers text encoder"
                + (dpr if "dpr" in re.split(r"[/_\-.]", options.encoder.lower()) else "")
                + "; use one such as intfloat/e5-base-v2, BAAI/bge-large-en-v1.5 or the bundled minilm-l6-v2"
            )
        # One forward pass at a time: concurrent callers would only fight over the same CPU cores.
        self._lock = threading.Lock()

    def encode(self, texts: Sequence[str], *, is_query: bool, batch_size: int = 64) -> np.ndarray:
        """Texts -> (N, D) float32, prefixed and (optionally) L2-normalised."""
        prefix = self.options.query_prefix if is_query else self.options.passage_prefix
        with self._lock:
            emb = self.model.encode(
                [prefix + t for t in texts],
                batch_size=batch_size,
                normalize_embeddings=self.options.normalize,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return np.ascontiguousarray(emb, dtype=np.float32)  # (N, D)

    def over_limit(self, texts: Sequence[str]) -> int:
        """How many of these passages (prefixed) run past the encoder's input limit, whose tail it never sees."""
        limit = getattr(self.model, "max_seq_length", None)
        tokenizer = getattr(self.model, "tokenizer", None)
        if not limit or tokenizer is None:
            return 0
        prefix = self.options.passage_prefix
        ids = tokenizer([prefix + t for t in texts], add_special_tokens=True, truncation=False)["input_ids"]
        return sum(len(i) > limit for i in ids)


#: passages of a build whose length is checked against the encoder's input limit (a sample: tokenizing every passage
#: twice would slow a large build)
LIMIT_SAMPLE = 1024


def make_faiss_index(vectors: np.ndarray, options: DenseOptions) -> Any:
    """An inner-product faiss index holding ``vectors`` (N, D) float32 (precomputed vectors, already in memory)."""
    n, d = vectors.shape
    index, train = empty_faiss_index(n, d, options)
    if train:
        sample = vectors if train >= n else vectors[np.sort(np.random.default_rng(0).choice(n, train, replace=False))]
        index.train(np.ascontiguousarray(sample))
    index.add(vectors)
    return index


def build_dense(
    texts: Texts,
    n: int,
    directory: str | Path,
    options: DenseOptions,
    *,
    batch_size: int = 64,
    encoder: Encoder | None = None,
    on_progress: Callable[[int], None] | None = None,
    resume_key: dict[str, Any] | None = None,
) -> dict[str, int]:
    """Encode ``n`` passage texts (store order) and write ``index.faiss`` in ``directory``. Returns counts.

    The embeddings go to disk chunk by chunk as they come and are never all held in memory: a flat index file is
    written row by row, ivf and hnsw indexes are filled from a float32 staging file in chunks, and a compressed
    (factory) index from its fp16 vector file (``searchrl.retrieval.dense_build``). ``texts`` may be a function
    of the first row to encode. With ``resume_key`` (what the vectors depend on), progress is recorded beside the
    vectors, and a later call with the same key in the same directory continues after the rows already encoded.
    """
    import faiss

    enc = encoder or Encoder(options)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    n_dims = enc.dimension
    path, dtype, header = vector_target(directory, options, n, n_dims)
    seen = [0, 0]  # passages checked against the encoder's limit, and how many ran past it
    over_limit = getattr(enc, "over_limit", None)  # an encoder of your own may not say

    def encode(batch: list[str]) -> np.ndarray:
        if over_limit is not None and seen[0] < LIMIT_SAMPLE:
            checked = batch[: LIMIT_SAMPLE - seen[0]]
            seen[0] += len(checked)
            seen[1] += over_limit(checked)
            if seen[0] >= min(LIMIT_SAMPLE, n) and seen[1]:
                console.print(
                    f"[yellow]warning:[/] {seen[1]} of the first {seen[0]} passages are longer than the encoder's "
                    f"{enc.model.max_seq_length} tokens, and their tails are not encoded: cut the corpus into "
                    "shorter passages (index build --max-words 100; in a run: pipeline.<index stage>.args.max_words)"
                )
        return enc.encode(batch, is_query=False, batch_size=batch_size)  # (C, D)

    encode_to_file(
        texts,
        n,
        n_dims,
        path,
        encode,
        dtype=dtype,
        header=header,
        chunk=batch_size * 8,  # a few batches per chunk, so progress moves and memory stays bounded
        key=resume_key,
        on_progress=on_progress,
    )
    if options.compressed:
        build_compressed(path, directory / "index.faiss", options.faiss)
    elif path.name != "index.faiss":  # ivf / hnsw: filled from the staged float32 rows, then those are removed
        index = index_from_rows(RowFile.npy(path), options)
        faiss.write_index(index, str(directory / "index.faiss"))
        del index
        path.unlink()
    return {"passages": n, "dimension": n_dims}


def write_vector_chunks(
    chunks: Iterable[np.ndarray], n: int, d: int, directory: str | Path, options: DenseOptions
) -> dict[str, Any]:
    """Compressed index from streamed (rows, D) chunks: ``vectors.f16.npy`` first, then ``index.faiss`` from it."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    write_vector_file(chunks, n, d, directory / VECTORS_FILE)
    return build_compressed(directory / VECTORS_FILE, directory / "index.faiss", options.faiss)


def write_vectors(vectors: np.ndarray, directory: str | Path, options: DenseOptions) -> Path:
    """Write (N, D) float32 ``vectors`` as ``directory/index.faiss`` (also for precomputed vectors)."""
    import faiss

    directory = Path(directory)
    if options.compressed:
        step = chunk_rows(vectors.shape[1])
        chunks = (vectors[i : i + step] for i in range(0, len(vectors), step))
        write_vector_chunks(chunks, len(vectors), vectors.shape[1], directory, options)
        return directory / "index.faiss"
    directory.mkdir(parents=True, exist_ok=True)
    index = make_faiss_index(np.ascontiguousarray(vectors, dtype=np.float32), options)
    path = directory / "index.faiss"
    faiss.write_index(index, str(path))
    return path


def read_faiss_index(path: str | Path, options: DenseOptions) -> Any:
    """Open an index file memory-mapped: flat codes (flat, HNSW storage) or inverted lists (IVF) stay on disk.

    A compressed (factory) index comes back wrapped with its exact re-ranking (``RerankedIndex``).
    """
    import faiss

    if options.compressed:
        return RerankedIndex.open(
            Path(path).parent,
            nprobe=options.nprobe,
            candidates=options.candidates,
            refine_factor=options.refine_factor,
        )

    flag = faiss.IO_FLAG_MMAP if options.faiss == "ivf" else faiss.IO_FLAG_MMAP_IFC
    index = faiss.read_index(str(path), flag | faiss.IO_FLAG_READ_ONLY)
    if options.faiss == "ivf":
        index.nprobe = options.nprobe
    elif options.faiss == "hnsw":
        index.hnsw.efSearch = options.ef_search
    return index


#: how deep a search goes to rank a tie that crosses its cut (a passage duplicated thousands of times, or a query
#: orthogonal to every passage, would otherwise search the whole index)
TIE_DEPTH = 4096


def search_ties_by_row(index: Any, q: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """``index.search(q, depth)`` with equal scores ranked by row, the lowest rows kept where a tie crosses the cut.

    faiss lists ties in heap order and keeps an arbitrary few of those tied at the cut: without this, the head of a
    deeper search is not a shallower one (duplicate passages score alike), and a query's hits depend on the k of
    the requests the server merged it with. One extra row shows whether a tie crosses the cut; only such queries
    are searched again, deeper until the tie ends (at most ``TIE_DEPTH`` rows: past that, as faiss keeps them)."""
    n = index.ntotal
    scores, rows = index.search(q, min(depth + 1, n))
    if 0 < depth < n:
        limit = min(n, max(TIE_DEPTH, depth + 1))
        for i in np.flatnonzero((rows[:, depth] >= 0) & (scores[:, depth] == scores[:, depth - 1])):
            cut, deeper, s, r = scores[i, depth - 1], depth + 1, scores[i].copy(), rows[i].copy()
            while deeper < limit:
                deeper = min(2 * deeper, limit)
                s, r = (a[0] for a in index.search(q[i : i + 1], deeper))
                if r[-1] < 0 or s[-1] != cut:  # every row scoring `cut` is in (s, r)
                    break
            keep = np.lexsort((r, -s))[: depth + 1]
            scores[i], rows[i] = s[keep], r[keep]
    order = np.lexsort((rows, -scores), axis=-1)[:, :depth]
    return np.take_along_axis(scores, order, -1), np.take_along_axis(rows, order, -1)


class DenseRetriever(LocalRetriever):
    """Nearest passages by inner product between the query embedding and the passage embeddings.

    Query embeddings are kept in an LRU cache (``cache_size`` queries; 0 disables it): RL rollouts of one group
    repeat queries, and a cached query costs no encoder pass. A batch encodes only its distinct uncached queries,
    ``batch_size`` at a time: 32 encoded a server's merged 128 queries in 4.1 ms each against 4.9 ms at 64 and
    6.6 ms at 128 (ONNX MiniLM, 2 CPUs; ``benchmarks/results/query_encoder_batch.md``).
    """

    def __init__(
        self,
        index: Any,
        store: PassageStore,
        encoder: Any,
        manifest: dict | None = None,
        *,
        batch_size: int = 32,
        cache_size: int = 10_000,
    ) -> None:
        if index.ntotal != len(store):
            raise ValueError(
                f"faiss index has {index.ntotal} vectors but the passage store has {len(store)}; rebuild the index"
            )
        if index.d != encoder.dimension:
            raise ValueError(
                f"index vectors are {index.d}-d but encoder '{encoder.options.encoder}' gives {encoder.dimension}-d; "
                "load the index with the encoder it was built with"
            )
        self.index = index
        self.store = store
        self.encoder = encoder
        self.manifest = manifest or {}
        self.batch_size = batch_size
        self.query_cache = LRUCache(cache_size)

    @classmethod
    def load(
        cls,
        directory: str | Path,
        store: PassageStore,
        options: DenseOptions,
        manifest: dict | None = None,
        *,
        query_encoder: str | None = None,
    ) -> DenseRetriever:
        """Open ``directory/index.faiss`` with the query encoder the manifest names (or ``query_encoder``)."""
        directory = Path(directory)
        index = read_faiss_index(directory / "index.faiss", options)
        kind = query_encoder or options.query_encoder
        if kind not in QUERY_ENCODERS:
            raise ValueError(f"unknown query encoder '{kind}'; use one of {', '.join(QUERY_ENCODERS)}")
        if kind == "onnx":
            if not (directory / "query_encoder").is_dir():
                raise FileNotFoundError(
                    f"{directory} has no exported query encoder; rebuild the index, or load it "
                    "with query_encoder='sentence-transformers'"
                )
            return cls(index, store, OnnxEncoder(directory / "query_encoder", options), manifest)
        return cls(index, store, Encoder(options), manifest)

    def embed_queries(self, queries: list[str]) -> np.ndarray:
        """(Q, D) float32 query embeddings: cached ones looked up, the distinct rest encoded in one call."""
        out = np.empty((len(queries), self.encoder.dimension), dtype=np.float32)  # (Q, D)
        missing: dict[str, list[int]] = {}
        for i, q in enumerate(queries):
            vec = self.query_cache.get(q)
            if vec is None:
                missing.setdefault(q, []).append(i)
            else:
                out[i] = vec
        if missing:
            fresh = self.encoder.encode(list(missing), is_query=True, batch_size=self.batch_size)  # (M, D)
            for (q, rows), vec in zip(missing.items(), fresh, strict=True):
                out[rows] = vec
                self.query_cache.put(q, vec.copy())
        return out

    def rank(self, queries: list[str], depth: int) -> list[Ranking]:
        q = self.embed_queries(queries)  # (Q, D)
        depth = min(depth, self.index.ntotal)
        scores, rows = search_ties_by_row(self.index, q, depth)  # (Q, depth) each; row -1 = fewer (IVF/HNSW)
        return [
            [(int(r), float(s)) for r, s in zip(rows_q, scores_q, strict=True) if r >= 0]
            for rows_q, scores_q in zip(rows, scores, strict=True)
        ]
