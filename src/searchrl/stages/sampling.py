"""Stages that sample the policy to build training data: rejection sampling and difficulty selection.

Both roll the questions out with the config's protocol, retriever, rollout limits and prompt style; the policy is
``model.policy`` run with transformers, or (``url``) an OpenAI-compatible completions server, a teacher, whose
tokenizer ``model.policy`` names. Both resume after an interruption: the questions sampled before it are kept in
``<out>.<tag>.partial`` files (:mod:`searchrl.sft.attempts`) and a rerun with the same settings samples only the
rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from searchrl.config import RunConfig
from searchrl.pipeline import load_generator, load_questions, make_protocol, make_retriever_for
from searchrl.rollout.engine import RolloutEngine, RolloutLimits
from searchrl.sft.attempts import AttemptLog
from searchrl.utils import console, write_jsonl

RULES = ("r1_searcher", "rag_r1")


@dataclass
class Teacher:
    """Where the samples come from: ``url`` (an OpenAI-compatible server) or, without it, ``model.policy`` here."""

    url: str | None = None
    served_model: str | None = None  # the model's name on the server (default: model.policy)
    timeout_s: float = 120.0
    concurrency: int = 8  # requests to the server in flight at once


@dataclass
class SamplingResult:
    kept: list[Any]  # trajectories (rejection sampling) or questions (difficulty selection)
    rows: list[dict[str, Any]] = field(default_factory=list)  # what was written
    stats: dict[str, float] = field(default_factory=dict)  # rejection sampling's counts
    buckets: dict[str, int] = field(default_factory=dict)  # difficulty selection's questions per bucket


def rollout_engine(cfg: RunConfig, teacher: Teacher | None = None, limits: RolloutLimits | None = None):
    """The engine a sampling stage rolls out with (:meth:`RolloutEngine.from_config`): the config's protocol,
    retriever and limits, and ``model.policy`` run here or on the teacher's server."""
    from searchrl.device import configure_from
    from searchrl.models import check_fetchable

    teacher = teacher or Teacher()
    limits = limits or RolloutLimits.from_config(cfg)
    check_fetchable(cfg)
    configure_from(cfg)  # model.device places the sampling model
    console.log(
        f"{cfg.rollout.protocol} rollouts: {limits.max_turns} turns, {limits.max_searches} searches, "
        f"top-{limits.topk}, {limits.max_new_tokens} tokens per turn, observations <= {limits.max_obs_tokens} tokens, "
        f"<= {limits.max_total_tokens} tokens in all"
    )
    protocol, retriever = make_protocol(cfg), make_retriever_for(cfg)
    generator = load_generator(
        cfg.model.policy, teacher.url, teacher.served_model, teacher.timeout_s, concurrency=teacher.concurrency
    )
    return RolloutEngine.from_config(cfg, generator, retriever, protocol=protocol, limits=limits)


#: the config sections that shape a sampling stage's attempts (the questions and the stopping rule are keyed apart):
#: a change elsewhere, say to a later RL stage's ``training.steps``, keeps the questions already sampled
SAMPLING_SECTIONS = ("model", "retrieval", "rollout", "plugins")


def attempt_log(cfg: RunConfig, out: Path, teacher: Teacher | None) -> AttemptLog:
    """Where a sampling stage writing ``out`` keeps its finished questions, keyed on the config sections that shape
    the attempts (:data:`SAMPLING_SECTIONS`), the policy's files (a local directory) and the indexes' manifests
    (:func:`~searchrl.eval.resume.settings_key`), and the teacher's server."""
    from searchrl.eval.resume import settings_key

    teacher = teacher or Teacher()
    key = settings_key(cfg, cfg.model.policy, SAMPLING_SECTIONS)
    return AttemptLog(Path(out), f"{key}/{teacher.url}/{teacher.served_model}")


def rejection_sampling(
    cfg: RunConfig,
    out: Path,
    *,
    data: str | None = None,
    teacher: Teacher | None = None,
    k: int = 4,
    metric: str | None = None,
    min_score: float = 1.0,
    require_internal_and_external: bool = False,
    max_per_question: int | None = None,
    quota: Sequence[str] = (),
    slice: bool = False,  # noqa: A002 - the recipe's name for it
    temperature: float = 1.0,
    top_p: float = 1.0,
    seed: int = 0,
    limit: int | None = None,
    batch_size: int = 32,
) -> SamplingResult:
    """Sample ``k`` trajectories per question (``data``, default the train split) and keep the correct, well-formed
    ones (``metric``: default the recipe's answer reward rule), written to ``out``: whole trajectories, or with
    ``slice`` RAG-R1's step-level SFT examples. ``quota``: at most N per source (``SOURCE=N``)."""
    from searchrl.rewards.correctness import Correctness
    from searchrl.sft.pipelines import rejection_sample, slice_steps

    examples = load_questions(cfg, data, limit)
    _check_quotas(quota, examples, None)
    engine = rollout_engine(cfg, teacher)
    rule = (
        Correctness.from_reward_config(cfg.reward, threshold=min_score)
        if metric is None
        else Correctness(metric=metric, threshold=min_score)
    )
    kept, stats = rejection_sample(
        engine,
        examples,
        k,
        correctness=rule,
        require_internal_and_external=require_internal_and_external,
        max_per_question=max_per_question,
        temperature=temperature,
        top_p=top_p,
        seed=seed,
        batch_size=batch_size,
        log=(log := attempt_log(cfg, out, teacher)),
    )
    rejected = ", ".join(
        f"{k.removeprefix('rejected_')} {int(v)}" for k, v in stats.items() if k.startswith("rejected_") and v
    )
    console.print(
        f"rejection sampling: kept {stats['kept']} of {stats['sampled']} trajectories "
        f"({stats['questions_with_kept']} of {stats['questions']} questions)"
        + (f"; rejected: {rejected}" if rejected else "")
    )
    if quota:
        from searchrl.sft.quotas import apply_quotas, parse_quotas, shortfall, source_of

        quotas = parse_quotas(list(quota))
        kept, counts = apply_quotas(
            kept,
            quotas,
            source=lambda t: source_of(t.metadata),
            seed=seed,
            group=lambda t: t.question_id,
            max_per_group=max_per_question,
        )
        short = shortfall(quotas, counts)
        console.print(
            "quotas: "
            + ", ".join(f"{q} {v}" for q, v in counts.items())
            + (f"; not filled: {short} (raise k or the questions)" if short else "")
        )
    rows = [s.to_dict() for t in kept for s in slice_steps(t)] if slice else [t.to_dict() for t in kept]
    write_jsonl(out, rows)
    log.discard()
    return SamplingResult(kept, rows, stats=stats)


def difficulty_selection(
    cfg: RunConfig,
    out: Path,
    *,
    data: str | None = None,
    teacher: Teacher | None = None,
    rule: str = "r1_searcher",
    n: int | None = None,
    metric: str | None = None,
    easy_below: int = 10,
    hard_above: int = 20,
    keep: Sequence[str] = ("medium", "hard"),
    unsolved_as: str = "unsolved",
    easy_fraction: float = 0.25,
    temperature: float | None = None,
    top_p: float = 1.0,
    seed: int = 0,
    quota: Sequence[str] = (),
    limit: int | None = None,
    batch_size: int = 32,
    max_turns: int | None = None,
    max_searches: int | None = None,
    records: Path | None = None,
) -> SamplingResult:
    """Select training questions by difficulty into ``out`` (FlashRAG JSONL; per-question records beside it):
    R1-Searcher's attempt buckets (``rule=r1_searcher``) or RAG-R1's answerability filter (``rule=rag_r1``, with up
    to 10 turns and searches unless ``max_turns`` / ``max_searches`` say otherwise, as RAG-R1's filter allowed)."""
    from searchrl.sft.pipelines import select_answerable, select_by_attempts

    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}; choose r1_searcher or rag_r1")
    if rule == "rag_r1":
        max_turns, max_searches = max_turns or 10, max_searches or 10
    limits = RolloutLimits.from_config(cfg)
    limits = replace(limits, max_turns=max_turns or limits.max_turns, max_searches=max_searches or limits.max_searches)
    examples = load_questions(cfg, data, limit)
    kept_buckets = [b for b in keep if b != "unsolved" or unsolved_as == "unsolved"]
    _check_quotas(quota, examples, kept_buckets if rule == "r1_searcher" else ["easy", "answerable"])
    engine = rollout_engine(cfg, teacher, limits)
    records = records or out.with_name(out.stem + ".records.jsonl")
    log = attempt_log(cfg, out, teacher).keyed(limits)  # the rule's own turn and search limits are not in cfg
    common = dict(top_p=top_p, seed=seed, batch_size=batch_size, out=out, records_out=records, log=log)
    if rule == "r1_searcher":
        kept, rows = select_by_attempts(
            engine,
            examples,
            24 if n is None else n,
            easy_below=easy_below,
            hard_above=hard_above,
            keep=list(keep),
            unsolved_as=unsolved_as,
            metric=metric or "cover_em",
            temperature=1.0 if temperature is None else temperature,
            **common,
        )
    else:
        kept, rows = select_answerable(
            engine,
            examples,
            10 if n is None else n,
            easy_fraction,
            metric=metric or "em",
            temperature=1.2 if temperature is None else temperature,
            **common,
        )
    if quota:
        kept = _apply_selection_quotas(kept, rows, list(quota), seed, out, records)
    buckets: dict[str, int] = {}
    for row in rows:
        buckets[row["bucket"]] = buckets.get(row["bucket"], 0) + 1
    return SamplingResult(kept, rows, buckets=dict(sorted(buckets.items())))


def _check_quotas(quota: Sequence[str], examples: Sequence[Any], buckets: Sequence[str] | None) -> None:
    """Quotas that could fill nothing fail here, before the model is loaded and the questions are sampled."""
    if quota:
        from searchrl.sft.quotas import check_quotas, parse_quotas, source_of

        check_quotas(parse_quotas(list(quota)), (source_of(e.metadata) for e in examples), buckets)


def _apply_selection_quotas(kept, rows, quota: list[str], seed: int, out: Path, records: Path):
    """Difficulty selection under per-source / per-bucket quotas (a question is selected once at most)."""
    from searchrl.sft.pipelines import _write
    from searchrl.sft.quotas import apply_quotas, parse_quotas, shortfall, source_of

    quotas = parse_quotas(quota)
    kept, counts = apply_quotas(
        kept,
        quotas,
        source=lambda e: source_of(e.metadata),
        bucket=lambda e: str(e.metadata.get("difficulty", "")),
        seed=seed,
    )
    ids = {e.id for e in kept}
    for row in rows:
        row["kept"] = row["id"] in ids
    _write(kept, rows, out, records)
    short = shortfall(quotas, counts)
    console.print(
        "quotas: "
        + ", ".join(f"{k} {v}" for k, v in counts.items())
        + (f"; not filled: {short} (more questions or attempts fill them)" if short else "")
    )
    return kept
