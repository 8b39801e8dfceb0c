"""R1-Searcher++'s memorization loss (spec 000 §4.2.2, Eq. 8-9): internalise what retrieval found.

Each RL step:

1. **select** rollouts whose answer is correct and that searched at least once (one per question by default);
2. **extract** the documents their searches returned (the inserted observations, result tags stripped);
3. **rewrite**: a frozen rewriter model sees the documents as knowledge it "already has" and the question, and writes
   an internal-only reasoning path in the protocol's format (``<|begin_internal_answer|> ... <|end_internal_answer|>``
   steps, then ``\\boxed{answer}``);
4. **validate**: the path passes the protocol's format check, makes no search call, has at least one internal step
   and no unclosed or stray internal tag (when the protocol reports them), gives a correct answer of at most
   ``max_answer_words`` words and does not say that anything was provided to it;
5. valid paths join a FIFO pool; the step's NLL term is the token-mean negative log-likelihood of up to
   ``batch_size`` pool paths under the policy, **conditioned on the question's prompt alone** (no documents), added
   to the policy loss with weight ``coef`` (mu = 0.1 in the paper).

The rewriter's text is re-tokenized with the policy's tokenizer: it is a training target (like SFT data), not a
sampled rollout, and the rewriter may be a different model. The paper leaves the rewriter's base model, decoding,
validation test and the size and refresh of the path set open; ``MemorizationConfig`` documents our choices.
"""

from __future__ import annotations

import random
import re
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from searchrl.config import MemorizationConfig
from searchrl.device import frozen_copy, model_device
from searchrl.generation.base import Generator, SamplingParams, mix_seed
from searchrl.generation.hf import HFGenerator
from searchrl.generation.prompts import render_prompt, reply_end_ids
from searchrl.models import load_policy
from searchrl.protocols import get_protocol
from searchrl.protocols.base import Protocol, Search
from searchrl.rewards.correctness import Correctness
from searchrl.rl.hooks import AuxNLL
from searchrl.rollout.trajectory import Trajectory

#: Our wording of the paper's "System Prompt for Rewriting only with Internal" (same tags, same rules); the step and
#: answer formats come from the protocol (:func:`rewriter_system`).
REWRITER_SYSTEM = (
    "You are a careful reasoning assistant with a broad store of knowledge. Part of that knowledge, listed below as "
    "your Activated Knowledge Matrix, bears on the current question. It is fully part of what you know: there is no "
    "difference between it and the rest of your knowledge. Never say or hint that any of it was given, provided, "
    "supplied or looked up for this task; state every fact as something you remember.\n"
    "Reason before you answer: break the question into simple sub-questions and settle them one at a time. Work out "
    "every sub-question from your own knowledge and write each one as {step} Do not search for anything. "
    "Finish with the final answer written as: {answer}\n\n"
    "Activated Knowledge Matrix:\n{documents}"
)
REWRITER_USER = "Now answer the following question.\nQuestion: {question}"


def extract_documents(traj: Trajectory, protocol: Protocol) -> list[str]:
    """The text of every observation a search inserted, result tags removed, in order, without duplicates."""
    docs: list[str] = []
    for turn in traj.turns:
        if turn.action != "search" or not turn.observation.strip():
            continue
        text = re.sub(r"[ \t]+", " ", protocol.observation_documents(turn.observation)).strip()
        if text and text not in docs:
            docs.append(text)
    return docs


def rewriter_system(protocol: Protocol, documents: Sequence[str]) -> str:
    """The rewriter's system text in ``protocol``'s formats: its recalled (internal) step and its final answer."""
    step = protocol.format_recalled(" your reasoning and answer for it ")
    if step is None:
        raise ValueError(
            f"the memorization rewriter writes internal steps; protocol {protocol.name!r} marks none "
            "(use rollout.protocol r1_searcher_pp, or memorization.coef 0)"
        )
    return REWRITER_SYSTEM.format(
        step=step.strip() + ".",
        answer=protocol.format_answer("YOUR_ANSWER").strip(),
        documents="\n".join(documents) if documents else "None",
    )


def rewriter_prompt(
    tokenizer, question: str, documents: Sequence[str], style: str = "auto", protocol: Protocol | None = None
) -> str:
    """The rewriter's prompt: the documents as its knowledge, then the question ("None" when there are none).
    ``protocol`` (default R1-Searcher++'s) gives the step and answer formats."""
    system = rewriter_system(protocol or get_protocol("r1_searcher_pp"), documents)
    user = REWRITER_USER.format(question=question.strip())
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    return render_prompt(tokenizer, messages, style, raw=f"{system}\n\n{user}\n")


@dataclass
class Rewrite:
    """One rewriter output and its verdict (kept for logs and tests)."""

    uid: str  # the source rollout's uid
    question: str
    golds: list[str]
    documents: list[str]
    text: str
    ok: bool
    reason: str = ""  # why validation failed ("" when ok)
    prompt_ids: list[int] = field(default_factory=list)  # the source rollout's prompt: the policy's view of q


@dataclass
class MemorizationStats:
    candidates: int = 0
    rewritten: int = 0
    valid: int = 0
    rejected: dict[str, int] = field(default_factory=dict)

    def as_metrics(self, pool: int, used: int) -> dict[str, float]:
        return {
            "memorization/candidates": float(self.candidates),
            "memorization/rewritten": float(self.rewritten),
            "memorization/valid": float(self.valid),
            "memorization/pool": float(pool),
            "memorization/used": float(used),
        }


class Memorizer(AuxNLL):
    """The auxiliary-NLL hook of the RL trainer: ``(step, trajectories) -> [(prompt_ids, response_ids, mask)]``.

    ``rewriter=None`` gives a validator only (``validate``, ``is_correct``), e.g. to filter rewriter SFT data."""

    def __init__(
        self,
        cfg: MemorizationConfig,
        rewriter: Generator | None,
        protocol: Protocol,
        policy_tokenizer,
        prompt_style: str = "auto",
        seed: int = 0,
        correctness: Correctness | None = None,
    ) -> None:
        self.cfg = cfg
        self.rewriter = rewriter
        self.protocol = protocol
        self.tok = policy_tokenizer
        self.prompt_style = prompt_style  # the rewriter's prompt (chat template or raw); NLL targets reuse rollout ids
        #: the run's one correctness rule (:func:`memorizer_correctness`); standalone, R1-Searcher++'s answer rule
        self.correctness = correctness or Correctness(
            metric=cfg.metric or "cover_em", max_words=10 if cfg.max_answer_words is None else cfg.max_answer_words
        )
        self.pool: deque[tuple[list[int], list[int], list[int]]] = deque(maxlen=cfg.pool_size or None)
        self.seed = seed  # the run's seed: mixed with the step for the rewriter's sampling
        self.rng = random.Random(seed)
        self.last_rewrites: list[Rewrite] = []
        self.last_metrics: dict[str, float] = {}

    # ------------------------------------------------------------------------------------------------ steps
    def is_correct(self, t: Trajectory) -> bool:
        """The answer reward's test: the response's final answer (the protocol's ``check_format``, e.g. the last
        ``\\boxed{}``) is correct under the run's :class:`~searchrl.rewards.correctness.Correctness`."""
        text = t.response_text(self.tok) if t.response_ids else "".join(x.text + x.observation for x in t.turns)
        return self.correctness(self.protocol.extract_answer(text), t.golds)

    def select(self, trajs: Sequence[Trajectory]) -> list[Trajectory]:
        """Correct rollouts (that searched, unless ``include_no_retrieval``), at most ``per_question`` each."""
        taken: dict[str, int] = {}
        out: list[Trajectory] = []
        for t in trajs:
            if not self.is_correct(t):
                continue
            if t.n_searches == 0 and not self.cfg.include_no_retrieval:
                continue
            if taken.get(t.question_id, 0) >= self.cfg.per_question:
                continue
            taken[t.question_id] = taken.get(t.question_id, 0) + 1
            out.append(t)
            if len(out) >= self.cfg.max_rewrites_per_step:
                break
        return out

    def validate(self, text: str, golds: Sequence[str]) -> str:
        """``""`` when the rewritten path may be memorised, else the reason it may not."""
        report = self.protocol.check_format(text)
        if not report.ok:
            return "format: " + "; ".join(report.problems)
        if report.n_searches or report.extra.get("n_external") or isinstance(self.protocol.parse(text), Search):
            return "searched"
        if report.extra.get("n_internal", 1) == 0:
            return "no internal step"
        if report.extra.get("internal_balanced") is False:  # the format check itself leaves internal tags alone
            return "format: an unclosed or stray internal tag"
        rule = self.correctness
        if report.answer is None or rule.score(report.answer, list(golds)) < rule.threshold:
            return "wrong answer"
        if rule.too_long(report.answer):
            return "answer too long"
        low = text.lower()
        leaked = next((p for p in self.cfg.reject_phrases if p.lower() in low), None)
        if leaked is not None:
            return f"mentions '{leaked}'"
        return ""

    def rewrite(self, trajs: Sequence[Trajectory], seed: int | None = None) -> list[Rewrite]:
        if not trajs:
            return []
        if self.rewriter is None:
            raise ValueError("this Memorizer has no rewriter model (it was built to validate paths only)")
        rtok = self.rewriter.tokenizer
        docs = [extract_documents(t, self.protocol) for t in trajs]
        style = self.prompt_style
        texts = [rewriter_prompt(rtok, t.question, d, style, self.protocol) for t, d in zip(trajs, docs, strict=True)]
        prompts = [list(rtok.encode(x, add_special_tokens=False)) for x in texts]
        params = SamplingParams(
            max_new_tokens=self.cfg.max_new_tokens,
            temperature=self.cfg.temperature,
            stop=tuple(self.protocol.stop_strings),
            seed=seed,
        )
        outs = self.rewriter.generate(prompts, params)
        rewrites = []
        for t, d, c in zip(trajs, docs, outs, strict=True):
            reason = "no end (length)" if c.finish_reason == "length" else self.validate(c.text, t.golds)
            rewrites.append(
                Rewrite(
                    t.uid,
                    t.question,
                    list(t.golds),
                    d,
                    c.text,
                    ok=not reason,
                    reason=reason,
                    prompt_ids=list(t.prompt_ids),
                )
            )
        return rewrites

    def target(self, prompt_ids: list[int], text: str) -> tuple[list[int], list[int], list[int]]:
        """The NLL sequence: the rollout's own prompt ids (the question, no documents) -> the rewritten path + the
        end of a reply (the chat template's, e.g. ``<|im_end|>``, or EOS; :func:`reply_end_ids`)."""
        resp = list(self.tok.encode(text.strip(), add_special_tokens=False))
        resp += reply_end_ids(self.tok, self.prompt_style)
        return prompt_ids, resp, [1] * len(resp)

    def metrics(self) -> dict[str, float]:
        return self.last_metrics

    def state_dict(self) -> dict:
        """The pool of validated paths and the stream that draws from it: a resumed run draws as one never stopped."""
        return {"pool": [tuple(list(x) for x in seq) for seq in self.pool], "rng": self.rng.getstate()}

    def load_state_dict(self, state: dict) -> None:
        self.pool.clear()
        self.pool.extend(tuple(list(x) for x in seq) for seq in state.get("pool", []))
        if "rng" in state:
            self.rng.setstate(state["rng"])

    def __call__(self, step: int, trajs: Sequence[Trajectory]) -> list[tuple[list[int], list[int], list[int]]]:
        chosen = self.select(trajs)
        rewrites = self.rewrite(chosen, seed=mix_seed(self.seed, step))  # runs with other seeds sample otherwise
        stats = MemorizationStats(candidates=len(chosen), rewritten=len(rewrites))
        fresh = []
        for r in rewrites:
            if r.ok:
                stats.valid += 1
                fresh.append(self.target(r.prompt_ids, r.text))
            else:
                key = r.reason.split(":")[0]
                stats.rejected[key] = stats.rejected.get(key, 0) + 1
        if self.cfg.pool_size:
            self.pool.extend(fresh)
            pool = list(self.pool)
            used = pool if len(pool) <= self.cfg.batch_size else self.rng.sample(pool, self.cfg.batch_size)
        else:
            used = fresh[: self.cfg.batch_size]
        self.last_rewrites = rewrites
        self.last_metrics = stats.as_metrics(len(self.pool), len(used))
        return used


def make_memorizer(cfg, protocol: Protocol, policy_model, policy_tokenizer) -> Memorizer:
    """A Memorizer over the configured rewriter: ``memorization.rewriter``, or a frozen copy of the initial policy."""
    m = cfg.memorization
    if m.rewriter:
        model, tok = load_policy(m.rewriter, cfg.model.dtype, frozen=True)
    else:
        model, tok = frozen_copy(policy_model, model_device(policy_model)), policy_tokenizer
    return Memorizer(
        m,
        HFGenerator(model, tok),
        protocol,
        policy_tokenizer,
        cfg.model.prompt_style,
        seed=cfg.training.seed,
        correctness=memorizer_correctness(cfg),
    )


def memorizer_correctness(cfg) -> Correctness:
    """The reward's answer rule, with ``memorization.metric`` / ``max_answer_words`` overriding when set."""
    m = cfg.memorization
    return Correctness.from_reward_config(cfg.reward, metric=m.metric, max_words=m.max_answer_words)


# ------------------------------------------------------------------------------------------ rewriter SFT data
