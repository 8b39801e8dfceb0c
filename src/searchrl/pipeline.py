"""The one resolver: from a config to the objects a run needs (data files, questions, retriever, protocol, policy).

Every command and stage resolves a recipe through these functions, so ``train``, ``sft``, ``eval``, ``ask``, the
data stages and ``demo`` agree. The rule for a retriever: ``retrieval.kind`` remote, web or mcp builds that client; a
local kind loads ``retrieval.index`` (an existing index decides its own kind), building it from the corpus when the
directory is still empty; without an index, the data corpus's index in :func:`default_index_dir` (built on demand).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from searchrl.config import RunConfig
from searchrl.config.evaluation import CONTEXTS
from searchrl.config.extensions import registered
from searchrl.data.records import QAExample
from searchrl.models import cache_dir
from searchrl.protocols import get_protocol
from searchrl.protocols.base import Protocol
from searchrl.retrieval.base import Retriever
from searchrl.utils import console, source_digest

#: retrieval kinds that are clients of a service, not local indexes.
REMOTE_KINDS = ("remote", "web", "mcp")


def is_service(kind: str) -> bool:
    """A retrieval kind with no local index: a service's client, or a plugin's retriever."""
    return kind in REMOTE_KINDS or kind in registered("retriever")


def data_dir(cfg: RunConfig) -> Path:
    """The directory holding corpus and QA files. ``source: synthetic`` generates the world once into the cache."""
    if cfg.data.source != "synthetic":
        path = Path(cfg.data.source)
        if not path.is_dir():
            raise FileNotFoundError(f"data.source {path} is not a directory; use 'synthetic' or a dataset directory")
        return path
    w = cfg.data.world
    name = f"e{w.entities}-s{w.seed}" + ("" if w.surface == "fixed" else f"-{w.surface}")
    name += ("" if w.relations == "fixed" else f"-{w.relations}-relations") + (f"-yn{w.yes_no:g}" if w.yes_no else "")
    name += (f"-bc{w.bridge_comparisons:g}" if w.bridge_comparisons else "") + ("-deaths" if w.deaths else "")
    out = cache_dir() / "worlds" / name
    if not (out / "world.json").exists():
        from searchrl.data.synth import generate_world, write_world

        console.log(
            f"generating the synthetic world ({w.entities} entities, seed {w.seed}, {w.surface} wording,"
            f" {w.relations} relations, comparisons {w.yes_no:g} yes/no and {w.bridge_comparisons:g} bridge) in {out}"
        )
        options = w.model_dump(exclude={"entities", "seed"})  # surface, relations, the comparison shares
        write_world(generate_world(w.entities, w.seed, **options), out)
    return out


def resolve_file(cfg: RunConfig, name: str) -> str:
    """A data file named in the config: ``hf:...`` and absolute paths as they are; a relative path is the data
    directory's file when that exists, else the file relative to the current directory when that exists (so
    ``data.train=runs/world/stage1.jsonl`` works from the shell), else the data directory's path (whose absence
    the loader reports)."""
    if name.startswith("hf:") or Path(name).is_absolute():
        return name
    return data_file(str(data_dir(cfg)), name)


def data_file(directory: str, name: str) -> str:
    """``name`` as a file of the data directory ``directory``, as :func:`resolve_file` finds it (``contexts``, the
    corpus of the paragraphs the questions ship with, as it is).

    >>> data_file("data", "hf:org/qa:dev"), data_file("data", "/abs/q.jsonl"), data_file("data", "q.jsonl")
    ('hf:org/qa:dev', '/abs/q.jsonl', 'data/q.jsonl')
    """
    if name.startswith("hf:") or Path(name).is_absolute() or name == CONTEXTS:
        return name
    in_data = Path(directory) / name
    if not in_data.exists() and Path(name).exists():
        return str(Path(name).resolve())
    return str(in_data)


def eval_set_indexes(cfg: RunConfig) -> list[str]:
    """The own index of each evaluation set that names one, where the evaluation finds it: a relative path in
    ``data.source`` first (a directory), as :func:`data_file` places it."""
    local = cfg.data.source != "synthetic" and Path(cfg.data.source).is_dir()
    own = [d.index for d in cfg.evaluation.datasets if not isinstance(d, str) and d.index]
    return [data_file(cfg.data.source, d) if local else d for d in own]


def load_split(
    cfg: RunConfig, split: str, limit: int | None = None, kinds: list[str] | None = None
) -> list[QAExample]:
    """Questions of a split; ``kinds`` (default: data.kinds for the train split) keeps synthetic kinds only. The
    train split also keeps only ``data.styles`` and drops ``data.held_out_styles`` (searchrl.data.styles); a style
    no question of the split has is an error naming the styles there are."""
    from searchrl.data.loaders import load_qa
    from searchrl.data.styles import select_styles

    name = {"train": cfg.data.train, "dev": cfg.data.dev, "test": cfg.data.test}.get(split, split)
    examples = load_qa(resolve_file(cfg, name), limit=None, fields=cfg.data.fields)
    if split == "train":
        d = cfg.data
        examples = select_styles(examples, d.styles, d.held_out_styles, where=f"the train split ({name})")
    kinds = kinds if kinds is not None else (cfg.data.kinds if split == "train" else [])
    if kinds:
        if problem := unknown_kinds(kinds, {str(k) for e in examples if (k := e.metadata.get("kind")) is not None}):
            raise ValueError(f"the {split} split ({name}): {problem}")
        examples = [e for e in examples if e.metadata.get("kind") in kinds]
    return examples[:limit] if limit is not None else examples


def unknown_kinds(kinds: list[str], present: set[str] | None = None) -> str | None:
    """Why question ``kinds`` (data.kinds, sft.kinds) hold a name that is neither a synthetic world's kind nor one
    of ``present`` (the kinds of the questions at hand), with the closest valid one; None when none is unknown."""
    import difflib

    from searchrl.data.synth_world import KINDS

    valid = sorted({*KINDS, *(present or ())})
    unknown = [k for k in kinds if k not in valid]
    if not unknown:
        return None
    close = difflib.get_close_matches(str(unknown[0]), valid, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return f"no question has the kind {', '.join(map(repr, unknown))}{hint}; the kinds: {', '.join(valid)}"


def load_questions(cfg: RunConfig, data: str | None = None, limit: int | None = None) -> list[QAExample]:
    """The questions of a QA file (``data``) when given, else the config's train split; never empty."""
    from searchrl.data.loaders import load_qa

    examples = (
        load_qa(data, limit=limit, fields=cfg.data.fields) if data is not None else load_split(cfg, "train", limit)
    )
    if not examples:
        where = data or f"the train split of {cfg.data.source} ({cfg.data.train})"
        raise ValueError(f"{where} holds no questions; check the file (or the limit)")
    return examples


def make_protocol(cfg: RunConfig) -> Protocol:
    """The configured protocol; options it takes from the rollout config (its own ``options_from_rollout``) give way
    to ``rollout.options``."""
    from searchrl.protocols import PROTOCOLS

    cls = PROTOCOLS.get(cfg.rollout.protocol)
    base = cls.options_from_rollout(cfg.rollout) if cls is not None else {}
    return get_protocol(cfg.rollout.protocol, **{**base, **cfg.rollout.options})


# ------------------------------------------------------------------------------------------------ retriever


def index_kind(index: str | Path) -> str | None:
    """The kind of the index in a directory (its manifest's), or None when the directory holds no index yet."""
    manifest = Path(index) / "manifest.json"
    return json.loads(manifest.read_text(encoding="utf-8"))["kind"] if manifest.exists() else None


def with_retriever(cfg: RunConfig, index: str | Path | None = None, urls: Sequence[str] | None = None) -> RunConfig:
    """``cfg`` with its retriever pointed at an index directory or at retrieval servers (``--index`` / ``--url``).

    An existing index decides its own kind; an empty directory keeps a local ``retrieval.kind`` (bm25 when the
    config named a service)."""
    if index is not None and urls:
        raise ValueError("give either --index DIR or --url URL, not both")
    r = cfg.retrieval
    if index is not None:
        kind = index_kind(index) or (r.kind if not is_service(r.kind) else "bm25")
        r = r.model_copy(update={"index": str(index), "kind": kind, "options": {}})
    elif urls:
        r = r.model_copy(update={"kind": "remote", "urls": list(urls), "options": {}})
    else:
        return cfg
    return cfg.model_copy(update={"retrieval": r})


def make_retriever_for(cfg: RunConfig, corpus: str | Path | None = None, *, simulate: bool = False) -> Retriever:
    """The configured retriever (see the module's rule). ``corpus``, when given, is checked against the index's
    fingerprint and builds a missing index; a missing index is otherwise built from the data corpus.

    ``retrieval.kind: simulated`` gives the simulated engine only with ``simulate`` (training rollouts); every other
    caller (evaluation, data stages, ``ask``) gets a real index of kind ``retrieval.simulated.eval_kind``."""
    from searchrl.retrieval import make_retriever

    if cfg.retrieval.kind == "simulated":
        if simulate:
            from searchrl.retrieval.simulated import make_simulated

            return make_simulated(cfg.retrieval.simulated, cfg.model.prompt_style)
        real = cfg.retrieval.model_copy(update={"kind": cfg.retrieval.simulated.eval_kind})
        cfg = cfg.model_copy(update={"retrieval": real})
    r = cfg.retrieval
    if is_service(r.kind):
        return make_retriever(r)
    if r.index is None:
        corpus = corpus or resolve_file(cfg, cfg.data.corpus)
        return make_retriever(r.model_copy(update={"index": str(default_index_dir(corpus, r.kind))}), corpus)
    kind = index_kind(r.index)
    if kind is None and corpus is None:
        corpus = resolve_file(cfg, cfg.data.corpus)
    return make_retriever(r.model_copy(update={"kind": kind or r.kind}), corpus)


def default_index_dir(corpus: str | Path, kind: str) -> Path:
    """Where an index built on demand lives. Data directories are read-only inputs: an index of a user's corpus goes
    into the cache (``<cache>/indexes/<corpus name>-<hash of its path, size and mtime>/index-<kind>``), so a changed
    corpus gets a new index; a synthetic world, which lives in the cache already, keeps it beside its corpus."""
    corpus = Path(corpus).resolve()
    if corpus.parent.is_relative_to(cache_dir().resolve()):
        return corpus.parent / f"index-{kind}"
    return cache_dir() / "indexes" / f"{corpus.parent.name}-{source_digest(corpus)}" / f"index-{kind}"


# ------------------------------------------------------------------------------------------------ policy


def policy_spec(cfg: RunConfig) -> str:
    """The model a run starts from: ``training.init_from`` when set, else ``model.policy``."""
    return cfg.training.init_from or cfg.model.policy


def load_tokenizer(model: str):
    """The tokenizer of a policy spec (alias, local directory or hub id), without loading the model."""
    from transformers import AutoTokenizer

    from searchrl.models import resolve_policy

    return AutoTokenizer.from_pretrained(resolve_policy(model))


def load_generator(
    model: str, url: str | None = None, served_model: str | None = None, timeout_s: float = 120.0, concurrency: int = 1
):
    """A transformers generator for ``model``, or an OpenAI-compatible client of ``url`` with ``model``'s tokenizer
    (``served_model``: the model's name on that server, default ``model``; ``concurrency`` requests in flight)."""
    if url:
        from searchrl.generation.openai_compat import OpenAICompatGenerator

        tok = load_tokenizer(model)
        return OpenAICompatGenerator(url, served_model or model, tok, timeout_s=timeout_s, concurrency=concurrency)
    from searchrl.generation.hf import HFGenerator
    from searchrl.models import load_policy

    policy, tokenizer = load_policy(model, frozen=True)
    return HFGenerator(policy, tokenizer)
