"""``searchrl index``: build and inspect index directories."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path

import typer

app = typer.Typer(
    help="Build and inspect retrieval indexes (BM25, dense, hybrid).\n\n"
    "Example: searchrl index build --corpus corpus.jsonl --kind bm25 --out indexes/bm25",
    no_args_is_help=True,
)


class Kind(StrEnum):
    bm25 = "bm25"
    dense = "dense"
    hybrid = "hybrid"


class FaissKind(StrEnum):
    flat = "flat"
    ivf = "ivf"
    hnsw = "hnsw"


@app.command("build")
def build(
    corpus: Path = typer.Option(..., help="passage file: JSONL {id, contents} / {id, title, text} / KILT, or parquet"),
    kind: Kind = typer.Option(Kind.bm25, help="index type"),
    out: Path = typer.Option(..., help="index directory to create"),
    encoder: str = typer.Option("minilm-l6-v2", help="dense encoder: alias, local directory or HF id"),
    batch_size: int = typer.Option(64, help="dense: passages per encoder batch"),
    faiss: FaissKind = typer.Option(FaissKind.flat, help="dense: exact inner product (flat), ivf or hnsw"),
    stemmer: str = typer.Option("english", help="bm25: PyStemmer language, or 'none'"),
    stopwords: str = typer.Option("en", help="bm25: stopword list, or 'none'"),
    query_encoder: str = typer.Option(
        None,
        help="dense: onnx (export the encoder for fast, torch-free serving) or sentence-transformers; "
        "default: onnx when the encoder can be exported",
    ),
    force: bool = typer.Option(False, "--force", help="replace an existing index in --out"),
) -> None:
    """Build an index directory from a corpus file (shows a progress bar).

    Example: searchrl index build --corpus corpus.jsonl --kind bm25 --out indexes/bm25
    """
    from searchrl.retrieval.index import build_index

    if kind != Kind.bm25:
        from searchrl.models import check_encoder

        check_encoder(encoder)
    path = build_index(
        corpus, kind.value, out, encoder=encoder, batch_size=batch_size, faiss=faiss.value,
        stemmer=None if stemmer.lower() == "none" else stemmer,
        stopwords=None if stopwords.lower() == "none" else stopwords,
        query_encoder=query_encoder, overwrite=force,
    )  # fmt: skip
    manifest = json.loads((path / "manifest.json").read_text())
    print(f"built {kind.value} index of {manifest['counts']['passages']:,} passages in "
          f"{manifest['build_seconds']} s -> {path}")  # the result: stdout  # fmt: skip


@app.command("info")
def info(
    directory: Path = typer.Argument(..., help="index directory"),
    corpus: Path = typer.Option(None, help="also check that the index was built from this corpus file"),
) -> None:
    """Print an index's manifest (kind, corpus fingerprint, encoder, counts, options) as JSON.

    Example: searchrl index info indexes/bm25 --corpus corpus.jsonl
    """
    from searchrl.retrieval.index import check_corpus, read_manifest

    manifest = read_manifest(directory)
    if corpus is not None:
        check_corpus(manifest, corpus, directory)
        manifest["corpus_check"] = f"ok: {corpus} matches"
    print(json.dumps(manifest, indent=2))
