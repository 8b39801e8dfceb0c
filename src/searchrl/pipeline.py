"""From a config to the objects a run needs: the world / data files, the retriever, the policy, the protocol.

Kept in one place so `train`, `sft`, `eval`, `ask` and `demo` resolve a recipe the same way.
"""

from __future__ import annotations

from pathlib import Path

from searchrl.config import RunConfig
from searchrl.data.records import QAExample
from searchrl.models import cache_dir
from searchrl.protocols import get_protocol
from searchrl.protocols.base import Protocol
from searchrl.retrieval.base import Retriever
from searchrl.utils import console


def data_dir(cfg: RunConfig) -> Path:
    """The directory holding corpus and QA files. ``source: synthetic`` generates the world once into the cache."""
    if cfg.data.source != "synthetic":
        path = Path(cfg.data.source)
        if not path.is_dir():
            raise FileNotFoundError(f"data.source {path} is not a directory; use 'synthetic' or a dataset directory")
        return path
    w = cfg.data.world
    out = cache_dir() / "worlds" / f"e{w.entities}-s{w.seed}"
    if not (out / "world.json").exists():
        from searchrl.data.synth import generate_world, write_world

        console.log(f"generating the synthetic world ({w.entities} entities, seed {w.seed}) in {out}")
        write_world(generate_world(w.entities, w.seed), out)
    return out


def resolve_file(cfg: RunConfig, name: str) -> str:
    """A data file named in the config: ``hf:...`` and absolute paths as they are; a relative path is the data
    directory's file when that exists, else the file relative to the current directory when that exists (so
    ``data.train=runs/world/stage1.jsonl`` works from the shell), else the data directory's path (whose absence
    the loader reports)."""
    if name.startswith("hf:") or Path(name).is_absolute():
        return name
    in_data = data_dir(cfg) / name
    if not in_data.exists() and Path(name).exists():
        return str(Path(name).resolve())
    return str(in_data)


def load_split(
    cfg: RunConfig, split: str, limit: int | None = None, kinds: list[str] | None = None
) -> list[QAExample]:
    """Questions of a split; ``kinds`` (default: data.kinds for the train split) keeps synthetic kinds only."""
    from searchrl.data.loaders import load_qa

    name = {"train": cfg.data.train, "dev": cfg.data.dev, "test": cfg.data.test}.get(split, split)
    examples = load_qa(resolve_file(cfg, name), limit=None)
    kinds = kinds if kinds is not None else (cfg.data.kinds if split == "train" else [])
    if kinds:
        examples = [e for e in examples if e.metadata.get("kind") in kinds]
    return examples[:limit] if limit is not None else examples


def make_protocol(cfg: RunConfig) -> Protocol:
    """The configured protocol; options it takes from the rollout config (its own ``options_from_rollout``) give way
    to ``rollout.options``."""
    from searchrl.protocols import PROTOCOLS

    cls = PROTOCOLS.get(cfg.rollout.protocol)
    base = cls.options_from_rollout(cfg.rollout) if cls is not None else {}
    return get_protocol(cfg.rollout.protocol, **{**base, **cfg.rollout.options})


def make_retriever_for(cfg: RunConfig) -> Retriever:
    """The configured retriever; a local index defaults to :func:`default_index_dir` and is built when missing."""
    from searchrl.retrieval import make_retriever

    r = cfg.retrieval
    if r.kind in ("remote", "web"):
        return make_retriever(r)
    corpus = resolve_file(cfg, cfg.data.corpus)
    if r.index is None:
        r = r.model_copy(update={"index": str(default_index_dir(corpus, r.kind))})
    return make_retriever(r, corpus)


def default_index_dir(corpus: str | Path, kind: str) -> Path:
    """Where an index built on demand lives. Data directories are read-only inputs: an index of a user's corpus goes
    into the cache (``<cache>/indexes/<corpus name>-<hash of its path, size and mtime>/index-<kind>``), so a changed
    corpus gets a new index; a synthetic world, which lives in the cache already, keeps it beside its corpus."""
    import hashlib

    corpus = Path(corpus).resolve()
    if corpus.parent.is_relative_to(cache_dir().resolve()):
        return corpus.parent / f"index-{kind}"
    st = corpus.stat() if corpus.exists() else None
    key = f"{corpus}|{st.st_size if st else 0}|{st.st_mtime_ns if st else 0}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return cache_dir() / "indexes" / f"{corpus.parent.name}-{digest}" / f"index-{kind}"


def policy_spec(cfg: RunConfig) -> str:
    return cfg.training.init_from or cfg.model.policy
