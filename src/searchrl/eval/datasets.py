"""Evaluation sets: ``evaluation.datasets`` -> questions (all, the first ``limit``, or a seeded random subset),
each with its own retriever when its entry names an index or a corpus.

The papers report every dataset separately plus their unweighted average, on a random subset of each dev / test
set (e.g. 500 questions, all 125 of Bamboogle). An entry is a string (a split name, a QA file, or
``hf:NAME[:CONFIG]:SPLIT``) or a mapping ``{data, name, sample, index, corpus}`` (``searchrl.config.EvalDataset``).
``corpus: contexts`` gives a set the paragraphs its questions ship with (HotpotQA, 2Wiki, MuSiQue, DPR files).
"""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from searchrl.config import EvalDataset, RunConfig
from searchrl.config.evaluation import CONTEXTS
from searchrl.data import loaders
from searchrl.data.records import QAExample
from searchrl.eval.report import AVERAGE
from searchrl.pipeline import (
    default_index_dir,
    is_service,
    load_split,
    make_retriever_for,
    resolve_file,
    with_retriever,
)
from searchrl.utils import source_digest

SPLITS = ("train", "dev", "test")
FLASHRAG = "RUC-NLPIR/FlashRAG_datasets"
#: FlashRAG's dataset names and the split the papers evaluate on (test where the set has one, else dev).
FLASHRAG_SPLITS = {
    "nq": "test",
    "triviaqa": "test",
    "popqa": "test",
    "hotpotqa": "dev",
    "2wikimultihopqa": "dev",
    "musique": "dev",
    "bamboogle": "test",
}


@dataclass
class EvalSet:
    """One resolved evaluation set."""

    name: str
    source: str
    examples: list[QAExample]
    #: this set's own index directory / corpus file (None: the run's retriever).
    index: str | None = None
    corpus: str | None = None
    #: the set's questions before ``evaluation.limit`` kept its first ones (0: not cut)
    of: int = 0

    @property
    def retriever_key(self) -> tuple[str | None, str | None]:
        return (self.index, self.corpus)


def dataset_name(source: str) -> str:
    """A short name for a dataset source: a file's stem, or ``NAME[_CONFIG]_SPLIT`` for ``hf:`` sources.

    >>> dataset_name("data/2wiki-mini/dev.jsonl"), dataset_name("hf:RUC-NLPIR/FlashRAG_datasets:hotpotqa:dev")
    ('dev', 'hotpotqa_dev')
    """
    if source.startswith("hf:"):
        parts = source[3:].split(":")
        parts = parts[1:] if len(parts) > 2 else parts  # drop the repository when a config is named
        return re.sub(r"[^\w.-]+", "_", "_".join(p.split("/")[-1] for p in parts if p))
    return Path(source).stem if Path(source).suffix else Path(source).name


def as_entry(entry: str | EvalDataset) -> EvalDataset:
    return entry if isinstance(entry, EvalDataset) else EvalDataset(data=entry)


def seeded_subset(examples: list[QAExample], n: int | None, seed: int) -> list[QAExample]:
    """``n`` questions drawn at random with ``random.Random(seed)``, in file order; all when ``n`` is None or
    not smaller than the file."""
    if n is None or n >= len(examples):
        return list(examples)
    chosen = sorted(random.Random(seed).sample(range(len(examples)), n))
    return [examples[i] for i in chosen]


def where_to_get(entry: str) -> str:
    """A hint naming where a missing evaluation file can be had: FlashRAG's copy when the name is one of its sets."""
    stem = Path(entry.split(":")[-2] if entry.startswith("hf:") and entry.count(":") >= 2 else entry).stem.lower()
    parent = Path(entry).parent.name.lower()
    name = next((n for n in FLASHRAG_SPLITS if n in (stem, parent) or stem.startswith(n + "_")), None)
    if name is None:
        return f"FlashRAG's copies of the papers' sets: https://huggingface.co/datasets/{FLASHRAG}"
    split = FLASHRAG_SPLITS[name]
    return (
        f"get it with `huggingface-cli download --repo-type dataset {FLASHRAG} --include '{name}/*' "
        f"--local-dir DIR` and list DIR/{name}/{split}.jsonl"
    )


def _resolve_qa_source(cfg: RunConfig, entry: str) -> str:
    if entry.startswith("hf:") or Path(entry).exists():
        return entry
    if cfg.data.source != "synthetic":
        candidate = Path(cfg.data.source) / entry
        if candidate.exists():
            return str(candidate)
    raise FileNotFoundError(
        f"dataset not found: {entry} (give an existing QA JSONL file, a split name {'/'.join(SPLITS)}, "
        f"or hf:NAME[:CONFIG]:SPLIT; {where_to_get(entry)})"
    )


def load_entry(cfg: RunConfig, data: str, fields: dict[str, str] | None = None) -> tuple[str, list[QAExample]]:
    """(source, every question) of a dataset entry's ``data``: a split name, a QA file or an ``hf:`` source;
    ``fields``: the file's names of a question's parts (default: ``data.fields``)."""
    if data in SPLITS:
        return resolve_file(cfg, getattr(cfg.data, data)), load_split(cfg, data)
    source = _resolve_qa_source(cfg, data)
    try:
        return source, loaders.load_qa(source, fields=cfg.data.fields if fields is None else fields)
    except Exception as err:  # an hf: source that cannot be fetched (offline, unknown name): one line, the fix
        if not source.startswith("hf:") or (isinstance(err, ValueError) and "\n" not in str(err)):
            raise
        raise ValueError(f"cannot load {source} ({type(err).__name__}); {where_to_get(data)}") from None


def _local(cfg: RunConfig, path: str | None) -> str | None:
    if path is None:
        return None
    return resolve_file(cfg, path)


def contexts_corpus(source: str, examples: list[QAExample]) -> str:
    """The corpus of the paragraphs ``examples`` (every question of ``source``) ship with, written once into the
    cache (``<cache>/contexts/<name>-<hash of the source's path, size and mtime>/corpus.jsonl``); its index is
    then built beside it on demand. Returns the corpus path."""
    from searchrl.data.contexts import shipped_passages
    from searchrl.data.corpus import write_corpus
    from searchrl.models import cache_dir

    corpus = cache_dir() / "contexts" / f"{dataset_name(source)}-{source_digest(source)}" / "corpus.jsonl"
    if not corpus.exists():
        write_corpus(corpus, shipped_passages((f"{source} question {ex.id}", ex.metadata) for ex in examples))
    return str(corpus)


def resolve_eval_sets(cfg: RunConfig) -> list[EvalSet]:
    """``evaluation.datasets`` -> one :class:`EvalSet` each (one per value of the entry's ``group_by`` field when
    the file holds several): its ``sample`` (seeded by ``evaluation.seed``), then at most ``evaluation.limit``
    questions. Names are the entry's ``name`` or the file's (``<folder>_<file>`` when files share a name, as
    FlashRAG's ``nq/test.jsonl`` and ``popqa/test.jsonl``), or the group's value; clashes get a suffix."""
    ev = cfg.evaluation
    if not ev.datasets:
        raise ValueError("no datasets to evaluate: pass --data FILE (repeatable) or set evaluation.datasets")
    entries = [as_entry(raw) for raw in ev.datasets]
    stems = Counter(dataset_name(e.data) for e in entries if e.name is None and e.data not in SPLITS)
    out: list[EvalSet] = []
    for entry in entries:
        source, examples = load_entry(cfg, entry.data, entry.fields)
        corpus = contexts_corpus(source, examples) if entry.corpus == CONTEXTS else _local(cfg, entry.corpus)
        base = entry.name or (entry.data if entry.data in SPLITS else dataset_name(entry.data))
        if entry.name is None and stems[base] > 1 and Path(entry.data).parent.name:  # FlashRAG's nq/test.jsonl, ...
            base = f"{Path(entry.data).parent.name}_{base}"
        for name, group in _groups(base, examples, entry.group_by, prefix=entry.name):
            group = seeded_subset(group, entry.sample, ev.seed)
            before, group = len(group), group[: ev.limit] if ev.limit is not None else group
            if not group:
                raise ValueError(f"dataset {entry.data} has no questions; check the file (or drop it from --data)")
            unique, k = name, 2
            while any(s.name == unique for s in out) or unique == AVERAGE:  # "average" names the summary's mean row
                unique, k = f"{name}_{k}", k + 1
            out.append(
                EvalSet(unique, source, group, _local(cfg, entry.index), corpus, before * (before > len(group)))
            )
    return out


def _groups(
    base: str, examples: list[QAExample], field: str | None, prefix: str | None = None
) -> list[tuple[str, list[QAExample]]]:
    """A file's questions split by the value of their ``field`` (in file order of first appearance), each group
    named by its value (``<prefix>_<value>`` when the entry is named); one group, named ``base``, when the field is
    unset or has fewer than two values."""
    if field is None:
        return [(base, examples)]
    groups: dict[str, list[QAExample]] = {}
    for ex in examples:
        value = ex.metadata.get(field)
        groups.setdefault("" if value is None else str(value), []).append(ex)
    if len(groups) < 2:
        return [(base, examples)]
    names = [re.sub(r"[^\w.-]+", "_", value) or f"no_{field}" for value in groups]
    return [(f"{prefix}_{n}" if prefix else n, group) for n, group in zip(names, groups.values(), strict=True)]


def limit_note(sets: list[EvalSet]) -> list[str]:
    """The summary's line on sets that ``evaluation.limit`` cut to their first questions (none when it cut none)."""
    cut = [f"{s.name} {len(s.examples)} of {s.of}" for s in sets if s.of]
    return [f"Only the first questions of a set (evaluation.limit): {', '.join(cut)}."] if cut else []


def resolve_datasets(cfg: RunConfig) -> dict[str, tuple[str, list[QAExample]]]:
    """``evaluation.datasets`` -> {name: (source, examples)} (see :func:`resolve_eval_sets`)."""
    return {s.name: (s.source, s.examples) for s in resolve_eval_sets(cfg)}


def own_retriever(cfg: RunConfig, index: str | None, corpus: str | None):
    """The retriever of a set that names its own index directory and / or corpus, with the run's retrieval
    settings (kind, encoder, top-k). An index directory that holds an index decides its own kind."""
    r = cfg.retrieval
    if is_service(r.kind):
        raise ValueError(
            f"an evaluation set's own index or corpus needs a local retrieval.kind, not {r.kind}; "
            "drop index/corpus from the entry or set retrieval.kind=bm25 or dense"
        )
    if index is None:
        if corpus is None:
            raise ValueError("own_retriever needs an index directory or a corpus")
        index = str(default_index_dir(corpus, r.kind))
    built = (Path(index) / "manifest.json").exists()
    if corpus is None and not built:
        from searchrl.retrieval.index import missing_index

        raise FileNotFoundError(
            f"evaluation index {missing_index(index, r.kind)}, or give the set's corpus: in its "
            "evaluation.datasets entry"
        )
    if corpus is not None and not str(corpus).startswith("hf:") and not Path(corpus).exists() and not built:
        raise FileNotFoundError(
            f"evaluation corpus not found: {corpus} (give the corpus file of this dataset's "
            "entry, e.g. the IRCoT corpus of HotpotQA / 2Wiki / MuSiQue)"
        )
    return make_retriever_for(with_retriever(cfg, index), corpus)
