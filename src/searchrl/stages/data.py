"""Data stages that need no policy: the synthetic world, a held-out split, an index, and oracle trajectories."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from searchrl.config import ConfigError, RunConfig
from searchrl.config.evaluation import CONTEXTS
from searchrl.pipeline import data_dir, load_split, load_tokenizer, make_protocol, make_retriever_for, resolve_file
from searchrl.utils import write_jsonl


def synth_world(
    out: Path,
    entities: int = 600,
    seed: int = 0,
    surface: str = "fixed",
    relations: str = "fixed",
    yes_no: float = 0.0,
    bridge_comparisons: float = 0.0,
    deaths: bool = False,
):
    """Generate a synthetic multi-hop world into ``out`` (corpus.jsonl, train/dev/test.jsonl, world.json); returns
    the world (its ``summary()`` counts the questions). ``surface``: "fixed" or "varied" question wording;
    ``relations``: "fixed" (twelve) or "open" (also a broad pool of further relations); ``yes_no`` and
    ``bridge_comparisons``: the shares of comparison questions asked as yes/no and as bridge comparisons;
    ``deaths``: also compare by the year a person died."""
    from searchrl.data.synth import generate_world, write_world

    world = generate_world(
        entities,
        seed,
        surface=surface,
        relations=relations,
        yes_no=yes_no,
        bridge_comparisons=bridge_comparisons,
        deaths=deaths,
    )
    write_world(world, out)
    return world


def split_questions(
    source: str,
    out: Path,
    heldout: int = 100,
    heldout_fraction: float | None = None,
    limit: int | None = None,
    *,
    fields: dict[str, str] | None = None,
) -> tuple[int, int]:
    """Split a QA file into ``out``/train.jsonl and heldout.jsonl by a fixed rule (the smallest SHA-256 of the ids
    are held out); ``heldout_fraction`` (e.g. 0.05) instead of a count; ``fields``: the file's names of a question's
    parts (``data.fields``; the files written use the usual ones). Returns (train, held-out) sizes."""
    from searchrl.data.loaders import load_qa
    from searchrl.data.splits import heldout_split

    if not source.startswith("hf:") and not Path(source).exists():
        raise ConfigError(
            f"QA file {source} not found; give your questions and corpus, e.g. data.source=DIR "
            "data.train=questions.jsonl data.corpus=corpus.jsonl"
        )
    examples = load_qa(source, fields=fields)[:limit]
    n_held = round(heldout_fraction * len(examples)) if heldout_fraction is not None else heldout
    if not examples:
        raise ConfigError(f"{source} holds no questions; check the file (or the split stage's limit)")
    if not 0 <= n_held < len(examples):
        raise ConfigError(
            f"holding out {n_held} of the {len(examples)} questions in {source} leaves "
            f"{'none' if n_held >= len(examples) else 'a negative number'} to train on; hold out 0 to "
            f"{len(examples) - 1} (--heldout N, or the split stage's heldout / heldout_fraction)"
        )
    train, held = heldout_split(examples, n_held)
    for name, rows in (("train", train), ("heldout", held)):
        write_jsonl(out / f"{name}.jsonl", [e.to_flashrag() for e in rows])
    return len(train), len(held)


def build_index_for(cfg: RunConfig, out: Path, corpus: str | None = None, **options: Any) -> dict[str, Any]:
    """Build the config's retriever index (``retrieval.kind``, ``encoder``, ``faiss``) of ``corpus`` (default: the
    data corpus; ``contexts``: the paragraphs ``data.train``'s questions ship with) into ``out``; ``options`` go to
    :func:`searchrl.retrieval.index.build_index` (``kind`` and ``encoder`` replace the config's). Returns the kind,
    the corpus and the number of passages."""
    from searchrl.retrieval.index import build_index

    corpus = corpus or resolve_file(cfg, cfg.data.corpus)
    if corpus == CONTEXTS:  # the paragraphs data.train's questions ship with (HotpotQA, 2Wiki, MuSiQue, DPR)
        from searchrl.data.loaders import load_qa
        from searchrl.eval.datasets import contexts_corpus

        source = resolve_file(cfg, cfg.data.train)
        corpus = contexts_corpus(source, load_qa(source, fields=cfg.data.fields))
    kind = options.pop("kind", cfg.retrieval.kind)
    encoder = options.pop("encoder", cfg.retrieval.encoder)
    if kind not in ("bm25", "dense", "hybrid"):
        raise ConfigError(f"an index stage builds bm25, dense or hybrid, not {kind}")
    if kind != "bm25":
        options.setdefault("faiss", cfg.retrieval.faiss)
    path = build_index(corpus, kind, out, encoder=encoder, overwrite=True, **options)
    manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
    return {"kind": kind, "corpus": str(corpus), "passages": manifest["counts"]["passages"]}


def oracle_data(
    cfg: RunConfig,
    tokenizer,
    split: str = "train",
    protocol=None,
    retriever=None,
    forms: str | list[str] | None = None,
) -> list:
    """Oracle trajectories of a synthetic world's questions (each recorded reasoning chain played out in the
    protocol's format, with the documents the retriever really returns), as every ``sft.oracle_*`` setting says.

    ``sft.limit`` whole trajectories (of ``sft.kinds``, default ``data.kinds``; round-robin over templates with
    ``sft.oracle_balance``), then (``sft.oracle_first_turns``) the first turn of as many further questions as
    step-level samples (RAG-R1's slicing). ``sft.oracle_mix`` ({kind: n}) picks the whole trajectories per kind
    instead: the first n questions of each kind in file order (their total is the limit); the first turns then
    come from the remaining questions. ``sft.oracle_topk`` documents per search (default ``retrieval.topk``).
    ``forms``: only questions of these forms (:func:`searchrl.rewards.forms.question_form`: choice, yes/no,
    open), e.g. ``["choice"]`` for a real QA file's "..., A or B?" questions under ``sft.oracle_unchained``.
    ``sft.oracle_grounded`` keeps only the questions searched as asked whose documents hold a gold answer, and the
    choice questions whose options' passages give years that decide the gold (the limit counts the trajectories
    kept)."""
    from searchrl.rewards.forms import QUESTION_FORMS, question_form
    from searchrl.sft.oracle import oracle_trajectories, round_robin_by_template
    from searchrl.sft.pipelines import slice_steps

    s = cfg.sft
    n_first, mix = s.oracle_first_turns, s.oracle_mix
    n_whole = sum(mix.values()) if mix else s.limit
    if mix and ((s.limit is not None and s.limit != n_whole) or s.oracle_balance):
        raise ValueError(
            f"sft.oracle_mix (sums to {n_whole}) sets the whole trajectories itself: leave sft.limit "
            "unset (or equal to that sum) and sft.oracle_balance off"
        )
    if n_first and n_whole is None:
        raise ValueError(
            "sft.oracle_first_turns needs an sft.limit (the whole trajectories; the first-turn samples "
            "come from the questions after them)"
        )
    limit = n_whole + n_first if n_first else n_whole
    kinds = s.kinds or None
    forms = [forms] if isinstance(forms, str) else forms
    if unknown := sorted(set(forms or ()) - set(QUESTION_FORMS)):
        raise ValueError(f"oracle forms {unknown}: use {', '.join(QUESTION_FORMS)}")

    def of_forms(examples: list) -> list:
        return [e for e in examples if question_form(e.question, e.answers) in forms] if forms else examples

    if mix:
        pool = of_forms(load_split(cfg, split, None, kinds=kinds))
        picked = {k: [e for e in pool if e.metadata.get("kind") == k][:n] for k, n in mix.items()}
        short = {k: f"{len(picked[k])} of {n}" for k, n in mix.items() if len(picked[k]) < n}
        if short:
            present = sorted({str(e.metadata.get("kind")) for e in pool})
            raise ValueError(
                f"sft.oracle_mix asks for more questions of a kind than the {split} split holds "
                f"({short}): lower those counts (kinds present: {present})"
            )
        whole = [e for k in mix for e in picked[k]]
        taken = {id(e) for e in whole}
        examples = whole + [e for e in pool if id(e) not in taken][:n_first]
    else:
        whole_split = s.oracle_balance or forms or s.oracle_grounded
        examples = of_forms(load_split(cfg, split, None if whole_split else limit, kinds=kinds))
        # grounding drops questions whose documents miss the gold: the limit then applies to the trajectories
        examples = (round_robin_by_template(examples) if s.oracle_balance else examples)[
            : None if s.oracle_grounded else limit
        ]
    if not examples:
        present = sorted({str(k) for e in load_split(cfg, split, None, kinds=[]) if (k := e.metadata.get("kind"))})
        hint = ""
        if kinds and not present:  # real questions: no synthetic kinds, and no recorded chains to play out
            hint = (
                "; its questions have no synthetic kinds (nor the reasoning chains oracle trajectories play out): "
                "cold-start on a synthetic world (data.source=synthetic for this stage, as multihop_cpu's world "
                "stage does) or on your own {question, response} rows (sft.data=FILE)"
            )
        elif kinds:
            hint = f" (kinds there: {', '.join(present)}); set sft.kinds to some of them"
        raise ValueError(
            f"no {split} questions in {cfg.data.source}"
            + (f" of kinds {kinds}" if kinds else "")
            + (f" of forms {forms}" if forms else "")
            + hint
        )
    data = oracle_trajectories(
        protocol or make_protocol(cfg),
        examples,
        retriever or make_retriever_for(cfg),
        tokenizer,
        s.oracle_topk or cfg.retrieval.topk,
        cfg.model.prompt_style,
        cfg.rollout.max_obs_tokens,
        s.oracle_plan,
        s.oracle_unchained,
        s.oracle_grounded,
        s.oracle_name_options,
    )
    if s.oracle_grounded and not mix:
        data = data[:limit]
    if n_first:
        data = data[:n_whole] + [slice_steps(t)[0] for t in data[n_whole:]]
    return data


def write_oracle_data(cfg: RunConfig, out: Path, split: str = "train", forms: str | list[str] | None = None) -> list:
    """:func:`oracle_data` of ``cfg``'s world with ``model.policy``'s tokenizer, written to ``out`` (SFT data)."""
    world = Path(cfg.data.source) if cfg.data.source != "synthetic" else data_dir(cfg)
    if not (world / "world.json").exists() and not (world / f"{split}.jsonl").exists():
        raise FileNotFoundError(
            f"{world} is not a synthetic world (no world.json); make one with `searchrl data synth --out {world}`"
        )
    if split not in ("train", "dev", "test"):
        raise ValueError(f"unknown split {split!r}; choose train, dev or test")
    trajs = oracle_data(cfg, load_tokenizer(cfg.model.policy), split, forms=forms)
    write_jsonl(out, [t.to_dict() for t in trajs])
    return trajs


def write_text_data(cfg: RunConfig, source: Path, out: Path, slice_steps: bool = False) -> int:
    """Text SFT rows of ``source`` (:mod:`searchrl.sft.text_data`) as trajectories of ``cfg``'s protocol with
    ``model.policy``'s tokenizer, or cut into RAG-R1's step-level samples (``slice_steps``), written to ``out``.
    Returns the number of rows written."""
    from searchrl.sft.pipelines import slice_steps as slices
    from searchrl.sft.text_data import sft_rows, text_trajectories

    rows = list(sft_rows(source))[: cfg.sft.limit]
    if not rows:
        raise ValueError(f"{source} holds no rows")
    tok, protocol = load_tokenizer(cfg.model.policy), make_protocol(cfg)
    trajs = text_trajectories(rows, protocol, tok, cfg.model.prompt_style, str(source))
    out_rows = [ex.to_dict() for t in trajs for ex in slices(t)] if slice_steps else [t.to_dict() for t in trajs]
    write_jsonl(out, out_rows)
    return len(out_rows)
