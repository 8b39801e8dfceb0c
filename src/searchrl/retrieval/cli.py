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


@app.command("build")
def build(
    corpus: Path = typer.Option(..., help="passage file: JSONL {id, contents} / {id, title, text} / KILT, or parquet"),
    kind: Kind = typer.Option(Kind.bm25, help="index type"),
    out: Path = typer.Option(..., help="index directory to create"),
    encoder: str = typer.Option("minilm-l6-v2", help="dense encoder: alias, local directory or HF id"),
    batch_size: int = typer.Option(64, help="dense: passages per encoder batch"),
    faiss: str = typer.Option(
        "flat",
        help="dense: flat (exact inner product), ivf, hnsw, or a faiss index_factory string such as "
        "'OPQ64,IVF4096,PQ64' (compressed, with exact re-ranking of the top --candidates)",
    ),
    nprobe: int = typer.Option(16, help="dense ivf / factory IVF: inverted lists probed per query"),
    candidates: int = typer.Option(100, help="dense factory index: passages per query re-ranked exactly"),
    stemmer: str = typer.Option("english", help="bm25: PyStemmer language, or 'none'"),
    stopwords: str = typer.Option("en", help="bm25: stopword list, or 'none'"),
    query_encoder: str = typer.Option(
        None,
        help="dense: onnx (export the encoder for fast, torch-free serving) or sentence-transformers; "
        "default: onnx when the encoder can be exported",
    ),
    force: bool = typer.Option(False, "--force", help="replace an existing index in --out"),
    device: str = typer.Option("auto", "--device", help="dense: where the encoder runs: auto, cpu, cuda, cuda:N"),
) -> None:
    """Build an index directory from a corpus file (shows a progress bar).

    Example: searchrl index build --corpus corpus.jsonl --kind bm25 --out indexes/bm25

    Compressed: searchrl index build --corpus corpus.jsonl --kind dense --faiss "IVF1024,PQ32" --out indexes/pq
    """
    from searchrl.device import configure
    from searchrl.retrieval.index import build_index

    configure(device)  # the passage encoder follows it (faiss stays on the CPU)
    if kind != Kind.bm25:
        from searchrl.models import check_encoder

        check_encoder(encoder)
    path = build_index(
        corpus, kind.value, out, encoder=encoder, batch_size=batch_size, faiss=faiss, nprobe=nprobe,
        candidates=candidates,
        stemmer=None if stemmer.lower() == "none" else stemmer,
        stopwords=None if stopwords.lower() == "none" else stopwords,
        query_encoder=query_encoder, overwrite=force,
    )  # fmt: skip
    manifest = json.loads((path / "manifest.json").read_text())
    print(f"built {kind.value} index of {manifest['counts']['passages']:,} passages in "
          f"{manifest['build_seconds']} s -> {path}")  # the result: stdout  # fmt: skip


@app.command("convert")
def convert(
    flat: Path = typer.Option(..., help="faiss IndexFlatIP file, e.g. Search-R1's e5_Flat.index"),
    corpus: Path = typer.Option(..., help="the passage file the Flat index was built from (same order)"),
    out: Path = typer.Option(..., help="index directory to create"),
    encoder: str = typer.Option("intfloat/e5-base-v2", help="the encoder that produced the Flat file's vectors"),
    faiss: str = typer.Option(None, help="faiss index_factory string; default OPQ{m},IVF{~4 sqrt N},PQ{m}"),
    nprobe: int = typer.Option(64, help="inverted lists probed per query"),
    candidates: int = typer.Option(100, help="passages per query re-ranked exactly with their fp16 vectors"),
    force: bool = typer.Option(False, "--force", help="replace an existing index in --out"),
) -> None:
    """Convert a Search-R1 / FlashRAG faiss Flat index into a compressed dense index, streaming its vectors.

    Example: searchrl index convert --flat e5_Flat.index --corpus wiki-18.jsonl --out indexes/wiki-pq
    """
    from searchrl.retrieval.convert import convert_flat_index
    from searchrl.utils import console

    path = convert_flat_index(flat, corpus, out, encoder=encoder, faiss=faiss, nprobe=nprobe, candidates=candidates,
                              overwrite=force)  # fmt: skip
    manifest = json.loads((path / "manifest.json").read_text())
    console.print(
        f"[green]converted[/green] {manifest['counts']['passages']:,} passages to "
        f"'{manifest['options']['dense']['faiss']}' in {manifest['build_seconds']} s -> {path}"
    )


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
