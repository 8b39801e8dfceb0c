"""Trajectory-data pipelines: rejection sampling (R1-Searcher++), teacher trajectories cut into step-level samples
(RAG-R1), and difficulty-based question selection (R1-Searcher, RAG-R1).

Every pipeline rolls out "one attempt per question per round" with the rollout engine
(:func:`~searchrl.sft.attempts.sample_attempts`, resumable): round ``r`` rolls out each question still being sampled
once, with a seed derived from ``(seed, tag, r)``. Rounds rather than one ``group_size=k`` call because (1) a
question can stop as soon as it is solved (difficulty selection counts attempts up to the first correct one), and
(2) OpenAI-compatible servers seed each request, so k identical prompts with one seed would come back as k identical
samples; a distinct seed per round gives independent samples on every backend.

Correctness is judged as the answer reward judges it: the protocol's format check extracts the answer from the
whole response text, and a metric of ``searchrl.rewards.metrics`` scores it against the golds (correct when the
score is at least ``min_score``).

Choices where the papers are silent (specs 000 §2.1, 001 §2.1 and 004 §2.1-2.4 list these as not stated):

- Rejection sampling keeps a trajectory when it ended in an answer, took no invalid or over-budget action, passes the
  protocol's format check and is correct; optionally (R1-Searcher++, "appropriate occurrences of both" tags read
  literally) it must hold a complete internal step, an external search and no unclosed or stray internal tag (which
  the format check leaves alone). A response identical to one kept for the question is dropped.
- R1-Searcher's "number of rollouts required to correctly answer a question" is the 1-based index of the first
  correct attempt: easy below 10, medium 10 to 20, difficult above 20 (the paper's thresholds, configurable). A
  question never solved within ``n`` attempts is "unsolved" and is not kept by default: the paper does not say
  what became of such questions, and they may lie beyond what the corpus can answer.
- RAG-R1's answerability filter: the first attempt is greedy (the paper's first answers come from its SFT-data run,
  whose temperature is not stated); a question answered wrongly gets up to ``n`` retries at temperature 1.2 and
  is kept when one of them is correct; a seeded ``easy_fraction`` (25%) of the questions answered correctly at
  first is added.
- Step slicing: the context of a ``documents_*`` sample is the whole history before the turn (every earlier search
  round), which is what the model sees at inference; the paper's figure shows one round and leaves longer
  prefixes unstated.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from searchrl.data.records import QAExample
from searchrl.protocols.base import FormatReport
from searchrl.rewards.correctness import Correctness
from searchrl.rollout.engine import RolloutEngine
from searchrl.rollout.trajectory import Trajectory
from searchrl.sft.attempts import AttemptLog, sample_attempts
from searchrl.sft.types import DOCUMENTS_ANSWER, DOCUMENTS_SEARCH, QUESTION_ANSWER, QUESTION_SEARCH, SFTExample
from searchrl.utils import write_jsonl

#: why a sampled trajectory was not kept, in the order the checks run (the first failing one is counted).
REJECT_REASONS = ("incomplete", "invalid_action", "format", "wrong", "no_internal_external", "duplicate", "over_cap")
#: R1-Searcher's difficulty buckets (spec 001 §2.1), plus questions never solved within n attempts.
ATTEMPT_BUCKETS = ("easy", "medium", "hard", "unsolved")
#: RAG-R1's answerability buckets (spec 004 §2.4).
ANSWERABILITY_BUCKETS = ("easy", "answerable", "unanswerable")


class _Judge:
    """Scores each trajectory once: format report of the whole response, and the run's :class:`Correctness` of its
    answer against the golds."""

    def __init__(self, engine: RolloutEngine, rule: Correctness) -> None:
        self.protocol = engine.protocol
        self.tokenizer = engine.tokenizer
        self.rule = rule
        self._cache: dict[str, tuple[FormatReport, float]] = {}

    def __call__(self, traj: Trajectory) -> tuple[FormatReport, float]:
        if traj.uid not in self._cache:
            report = traj.format_report(self.protocol, self.tokenizer)
            self._cache[traj.uid] = (report, self.rule.score(report.answer, traj.golds))
        return self._cache[traj.uid]

    def correct(self, traj: Trajectory) -> bool:
        return self.rule(self.answer(traj), traj.golds)

    def answer(self, traj: Trajectory) -> str | None:
        return self(traj)[0].answer


def _rule(metric: str, min_score: float, correctness: Correctness | None) -> Correctness:
    return correctness if correctness is not None else Correctness(metric=metric, threshold=min_score)


# ----------------------------------------------------------------------------------------- rejection sampling
def rejection_sample(
    engine: RolloutEngine,
    examples: Sequence[QAExample],
    k: int,
    *,
    metric: str = "cover_em",
    min_score: float = 1.0,
    correctness: Correctness | None = None,
    require_internal_and_external: bool = False,
    max_per_question: int | None = None,
    temperature: float = 1.0,
    top_p: float = 1.0,
    seed: int = 0,
    batch_size: int = 32,
    log: AttemptLog | None = None,
) -> tuple[list[Trajectory], dict[str, float]]:
    """Sample ``k`` trajectories per question and keep the correct, well-formed ones (R1-Searcher++ cold start).

    Kept: ended in an answer; every turn a search or the answer (no invalid or over-budget action); the protocol's
    ``check_format`` is ok; the answer is correct (the run's ``correctness``, else ``metric >= min_score``); with
    ``require_internal_and_external``, a complete internal step, an external search and balanced internal tags
    (``FormatReport.extra``'s ``n_internal``, ``n_external``, ``internal_balanced``: R1-Searcher++'s); not identical
    to a response already kept for the question; at most ``max_per_question`` per question. Returns the kept
    trajectories (question order, then attempt order) and stats: counts of questions, samples, kept, and
    ``rejected_<reason>`` for each of ``REJECT_REASONS``.
    """
    if require_internal_and_external:
        extra = engine.protocol.check_format("").extra
        if not {"n_internal", "n_external", "internal_balanced"} <= set(extra):
            raise ValueError(
                f"protocol {engine.protocol.name!r} has no internal steps to count (only r1_searcher_pp does); "
                "drop the internal-and-external requirement"
            )
    if max_per_question is not None and max_per_question < 1:
        raise ValueError(f"max_per_question must be >= 1 (or None for no cap), got {max_per_question}")
    judge = _Judge(engine, _rule(metric, min_score, correctness))
    attempts = sample_attempts(
        engine, examples, k, temperature=temperature, top_p=top_p, seed=seed, batch_size=batch_size, tag="rs", log=log
    )

    def reason(traj: Trajectory) -> str | None:
        if traj.stop_reason != "answer":
            return "incomplete"
        if any(turn.action not in ("search", "answer") for turn in traj.turns):
            return "invalid_action"
        report, _ = judge(traj)
        if not report.ok:
            return "format"
        if not judge.correct(traj):
            return "wrong"
        both = report.extra.get("n_internal", 0) and report.extra.get("n_external", 0)
        if require_internal_and_external and not (both and report.extra["internal_balanced"]):
            return "no_internal_external"
        return None

    kept: list[Trajectory] = []
    rejected: Counter[str] = Counter()
    questions_with_kept = 0
    for trajs in attempts:
        seen: set[tuple[int, ...]] = set()
        for traj in trajs:
            why = reason(traj)
            key = tuple(traj.response_ids)
            if why is None and key in seen:
                why = "duplicate"
            if why is None and max_per_question is not None and len(seen) >= max_per_question:
                why = "over_cap"
            if why is not None:
                rejected[why] += 1
                continue
            seen.add(key)
            kept.append(traj)
        questions_with_kept += bool(seen)
    sampled = sum(len(a) for a in attempts)
    stats: dict[str, float] = {
        "questions": len(examples),
        "sampled": sampled,
        "kept": len(kept),
        "questions_with_kept": questions_with_kept,
        "keep_rate": len(kept) / sampled if sampled else 0.0,
    }
    stats.update({f"rejected_{r}": rejected[r] for r in REJECT_REASONS})
    return kept, stats


# ---------------------------------------------------------------------------------- teacher trajectories
def slice_steps(traj: Trajectory) -> list[SFTExample]:
    """RAG-R1's step-level samples (spec 004 §2.2): one per search or answer turn of the trajectory.

    The target is the turn's own sampled tokens (reasoning plus the search call, or reasoning plus the answer), all
    with loss mask 1; the context is the prompt plus every response token before the turn, so documents are only
    ever context. The kind is ``question_*`` when no search result precedes the turn, else ``documents_*``.
    Invalid, over-budget and empty turns produce no sample (their tokens stay in later contexts).
    Token ids are sliced from the trajectory, never re-tokenized.
    """
    sampled = [i for i, m in enumerate(traj.action_mask) if m]
    if sum(t.n_gen_tokens for t in traj.turns) != len(sampled):
        raise ValueError(
            f"trajectory {traj.uid}: its turns hold {sum(t.n_gen_tokens for t in traj.turns)} generated tokens but "
            f"its action mask marks {len(sampled)}; it was not recorded by the rollout engine"
        )
    out: list[SFTExample] = []
    pos = 0
    after_documents = False
    for turn in traj.turns:
        idx = sampled[pos : pos + turn.n_gen_tokens]
        pos += turn.n_gen_tokens
        if idx and turn.action in ("search", "answer"):
            start, end = idx[0], idx[-1] + 1
            if end - start != len(idx):
                raise ValueError(f"trajectory {traj.uid}: the tokens of one turn are not contiguous")
            if turn.action == "search":
                kind = DOCUMENTS_SEARCH if after_documents else QUESTION_SEARCH
            else:
                kind = DOCUMENTS_ANSWER if after_documents else QUESTION_ANSWER
            out.append(
                SFTExample(
                    prompt_ids=list(traj.prompt_ids) + traj.response_ids[:start],
                    response_ids=traj.response_ids[start:end],
                    loss_mask=[1] * (end - start),
                    kind=kind,
                    source_uid=traj.uid,
                )
            )
        if turn.action == "search" and turn.observation:
            after_documents = True
    return out


def teacher_sft_examples(
    engine: RolloutEngine,
    examples: Sequence[QAExample],
    k: int = 1,
    *,
    metric: str = "em",
    min_score: float = 1.0,
    correctness: Correctness | None = None,
    temperature: float = 1.0,
    top_p: float = 1.0,
    seed: int = 0,
    batch_size: int = 32,
    log: AttemptLog | None = None,
) -> tuple[list[SFTExample], list[Trajectory], dict[str, float]]:
    """RAG-R1's SFT data: a teacher (the engine's generator, e.g. an OpenAI-compatible server) rolls out ``k``
    trajectories per question, the correct well-formed ones are kept (as ``rejection_sample`` keeps them) and cut
    into step-level samples by ``slice_steps``. Returns (samples, kept trajectories, stats with ``kind_<kind>``
    counts). The teacher's tokenizer must be the student's: samples carry the teacher's token ids."""
    kept, stats = rejection_sample(
        engine,
        examples,
        k,
        metric=metric,
        min_score=min_score,
        correctness=correctness,
        temperature=temperature,
        top_p=top_p,
        seed=seed,
        batch_size=batch_size,
        log=log,
    )
    samples = [s for traj in kept for s in slice_steps(traj)]
    kinds = Counter(s.kind for s in samples)
    stats.update({"sft_examples": len(samples)})
    stats.update(
        {
            f"kind_{kind}": kinds[kind]
            for kind in (QUESTION_ANSWER, QUESTION_SEARCH, DOCUMENTS_ANSWER, DOCUMENTS_SEARCH)
        }
    )
    return samples, kept, stats


# ---------------------------------------------------------------------------------------- difficulty selection
def attempt_bucket(first_correct: int | None, easy_below: int = 10, hard_above: int = 20) -> str:
    """R1-Searcher's difficulty (spec 001 §2.1) from the 1-based index of the first correct attempt.

    >>> [attempt_bucket(a) for a in (1, 9, 10, 20, 21, None)]
    ['easy', 'easy', 'medium', 'medium', 'hard', 'unsolved']
    """
    if first_correct is None:
        return "unsolved"
    if first_correct < easy_below:
        return "easy"
    return "medium" if first_correct <= hard_above else "hard"


def _with_difficulty(ex: QAExample, bucket: str) -> QAExample:
    return replace(ex, metadata={**ex.metadata, "difficulty": bucket})


def _write(kept: list[QAExample], records: list[dict[str, Any]], out: Path | None, records_out: Path | None) -> None:
    if out is not None:
        write_jsonl(out, (ex.to_flashrag() for ex in kept))
    if records_out is not None:
        write_jsonl(records_out, records)


def select_by_attempts(
    engine: RolloutEngine,
    examples: Sequence[QAExample],
    n: int = 24,
    *,
    easy_below: int = 10,
    hard_above: int = 20,
    keep: Sequence[str] = ("medium", "hard"),
    unsolved_as: str = "unsolved",
    metric: str = "cover_em",
    min_score: float = 1.0,
    correctness: Correctness | None = None,
    temperature: float = 1.0,
    top_p: float = 1.0,
    seed: int = 0,
    stop_at_first_correct: bool = True,
    batch_size: int = 32,
    out: str | Path | None = None,
    records_out: str | Path | None = None,
    log: AttemptLog | None = None,
) -> tuple[list[QAExample], list[dict[str, Any]]]:
    """R1-Searcher's difficulty-based selection: roll each question out up to ``n`` times and bucket it by the
    attempt that first answers it correctly (``attempt_bucket``); keep the ``keep`` buckets (medium and hard).

    ``n`` must exceed ``hard_above`` so that a hard question can be told from a medium one. ``unsolved_as="hard"``
    counts a question no attempt answered as hard ("more than 20 rollouts" when the attempts stop at ``n``): first
    correct at attempts 21-24 alone is rare, so few questions would be hard. With
    ``stop_at_first_correct`` (default) a solved question is not sampled again, so ``n_correct`` is 0 or 1;
    without it every question gets ``n`` rollouts and ``n_correct`` is its full count. Returns the kept
    examples (input order, ``metadata["difficulty"]`` set) and one record per question; writes them as JSONL
    (kept examples in FlashRAG layout to ``out``, records to ``records_out``) when those paths are given.
    """
    if not 1 <= easy_below <= hard_above:
        raise ValueError(f"need 1 <= easy_below <= hard_above, got easy_below={easy_below}, hard_above={hard_above}")
    if n <= hard_above:
        raise ValueError(
            f"with n={n} attempts a hard question (first correct after attempt {hard_above}) cannot be seen; "
            f"raise n above {hard_above} or lower hard_above"
        )
    unknown = set(keep) - set(ATTEMPT_BUCKETS) or {unsolved_as} - {"unsolved", "hard"}
    if unknown:
        raise ValueError(f"unknown bucket(s) {sorted(unknown)}: keep {', '.join(ATTEMPT_BUCKETS)}; unsolved_as hard")
    judge = _Judge(engine, _rule(metric, min_score, correctness))
    attempts = sample_attempts(
        engine,
        examples,
        n,
        temperature=temperature,
        top_p=top_p,
        seed=seed,
        batch_size=batch_size,
        stop_when=judge.correct if stop_at_first_correct else None,
        tag="difficulty",
        log=None if log is None else log.keyed(judge.rule),
    )
    kept: list[QAExample] = []
    records: list[dict[str, Any]] = []
    for ex, trajs in zip(examples, attempts, strict=True):
        correct = [judge.correct(t) for t in trajs]
        first = correct.index(True) + 1 if any(correct) else None
        bucket = attempt_bucket(first, easy_below, hard_above).replace("unsolved", unsolved_as)
        if bucket in keep:
            kept.append(_with_difficulty(ex, bucket))
        records.append(
            {
                "id": ex.id,
                "question": ex.question,
                "answers": list(ex.answers),
                "bucket": bucket,
                "kept": bucket in keep,
                "first_correct": first,
                "n_rollouts": len(trajs),
                "n_correct": sum(correct),
                "predictions": [judge.answer(t) for t in trajs],
            }
        )
    _write(kept, records, None if out is None else Path(out), None if records_out is None else Path(records_out))
    if log is not None:
        log.discard()
    return kept, records


def select_answerable(
    engine: RolloutEngine,
    examples: Sequence[QAExample],
    n: int = 10,
    easy_fraction: float = 0.25,
    *,
    metric: str = "em",
    min_score: float = 1.0,
    correctness: Correctness | None = None,
    initial_temperature: float = 0.0,
    temperature: float = 1.2,
    top_p: float = 1.0,
    seed: int = 0,
    batch_size: int = 32,
    out: str | Path | None = None,
    records_out: str | Path | None = None,
    log: AttemptLog | None = None,
) -> tuple[list[QAExample], list[dict[str, Any]]]:
    """RAG-R1's answerability filter (spec 004 §2.4): keep the questions answered wrongly at first (greedy by
    default) but correctly in at least one of up to ``n`` sampled retries (temperature 1.2, stopping at the first
    correct one), plus ``round(easy_fraction * n_easy)`` of the questions answered correctly at first, drawn with
    ``random.Random(seed)``. Buckets: easy / answerable / unanswerable. Returns the kept examples (input order,
    ``metadata["difficulty"]`` set) and one record per question; writes JSONL like ``select_by_attempts``.
    """
    if not 0.0 <= easy_fraction <= 1.0:
        raise ValueError(f"easy_fraction must be within [0, 1], got {easy_fraction}")
    judge = _Judge(engine, _rule(metric, min_score, correctness))
    first_pass = sample_attempts(
        engine,
        examples,
        1,
        temperature=initial_temperature,
        top_p=top_p,
        seed=seed,
        batch_size=batch_size,
        tag="initial",
        log=log,
    )
    wrong = [i for i, (t,) in enumerate(first_pass) if not judge.correct(t)]
    retry_attempts = sample_attempts(
        engine,
        [examples[i] for i in wrong],
        n,
        temperature=temperature,
        top_p=top_p,
        seed=seed,
        batch_size=batch_size,
        stop_when=judge.correct,
        tag="retry",
        log=None if log is None else log.keyed(judge.rule),
    )
    retries: dict[int, list[Trajectory]] = dict(zip(wrong, retry_attempts, strict=True))
    buckets: list[str] = []
    for i in range(len(examples)):
        if i not in retries:
            buckets.append("easy")
        else:
            buckets.append("answerable" if any(judge.correct(t) for t in retries[i]) else "unanswerable")
    easy = [i for i, b in enumerate(buckets) if b == "easy"]
    n_easy = math.floor(easy_fraction * len(easy) + 0.5)  # round half up, unlike round()'s half to even
    chosen = set(random.Random(seed).sample(easy, n_easy))
    kept: list[QAExample] = []
    records: list[dict[str, Any]] = []
    for i, (ex, bucket) in enumerate(zip(examples, buckets, strict=True)):
        keep = bucket == "answerable" or i in chosen
        if keep:
            kept.append(_with_difficulty(ex, bucket))
        tries = retries.get(i, [])
        hits = [judge.correct(t) for t in tries]
        records.append(
            {
                "id": ex.id,
                "question": ex.question,
                "answers": list(ex.answers),
                "bucket": bucket,
                "kept": keep,
                "initial_answer": judge.answer(first_pass[i][0]),
                "initial_correct": bucket == "easy",
                "n_retries": len(tries),
                "first_correct_retry": hits.index(True) + 1 if any(hits) else None,
                "retry_predictions": [judge.answer(t) for t in tries],
            }
        )
    _write(kept, records, None if out is None else Path(out), None if records_out is None else Path(records_out))
    if log is not None:
        log.discard()
    return kept, records
