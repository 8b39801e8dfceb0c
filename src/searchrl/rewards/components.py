"""Reward components as pure batch functions, and the composer that sums them with the recipe's weights.

Every component has the same shape::

    fn(inputs: Sequence[RewardInput], **params) -> (scores: list[float], metrics: dict[str, float])

``scores`` has one entry per input (unweighted); ``metrics`` are batch statistics. Params are keyword-only, so an
unknown or misspelt param is rejected when the composer is built, not halfway through a run. Components never
catch exceptions to return 0: a malformed input is a bug and stays loud.

Components and the papers' values (sources: specs 000-004):

=========  ==================================================================================================
answer     metric em / f1 / cover_em / cover_em_tokens of the extracted answer against the golds (max over golds);
           ``max_words`` caps the answer length (R1-Searcher++: over 10 words scores 0, spec 000 §3.2);
           ``incorrect`` is the score of a wrong answer (R1-Searcher's ±1 ablation, spec 001 §3.3, uses -1).
format     from the protocol's ``FormatReport``. ``paper`` picks the scheme:
           ``r1_searcher_stage1`` +``value`` (0.5) if the format is correct and the answer not empty, else 0
           (spec 001 §3.1 Eq. 2; ``require_answer: false`` pays an empty answer block, as the authors' code);
           ``r1_searcher_stage2`` 0 if correct, else ``penalty`` (paper -2; the authors' Llama code uses -1,
           spec 001 §3.2 and §11.3); ``r1_searcher_pp`` 0 / ``penalty`` = -2 (spec 000 §3.1 Eq. 3);
           ``r_search`` Eq. 5 of spec 002 §4.3 with gamma_e = gamma_a = 0.2. Search-R1 and RAG-R1 have none.
retrieval  +``value`` (0.5) when the rollout searched at least once, else 0 (R1-Searcher stage 1, spec 001 §3.1
           Eq. 1: "0.5 if n >= 1").
answer_recall  +``value`` (0.5) when a gold answer occurs in the documents the rollout retrieved [O]: the answer
           recall of its searches, R1-Searcher's retrieval reward made to pay for finding, not only searching.
group      R1-Searcher++ Eqs. 5-6 (spec 000 §3.3): among the correct rollouts of a group, those with the fewest
           searches get min(2 sigma^2, eta), eta = 2. ``sigma_over`` picks the paper's two readings (see
           :func:`group_reward`).
evidence   R-Search Eq. 4 (spec 002 §4.2): F1 of the answer a frozen reader gives from the question and the
           rollout's evidence block alone.
judge      1 if an LLM judge accepts the answer (:mod:`searchrl.rewards.judge`).
hops       a process reward of ours [O], for data that records each hop's answer (the synthetic world's
           ``metadata.chain[].answer``): the fraction of the question's intermediate answers the policy's own text
           states (see :func:`hop_reward`). None of the five papers has it.
=========  ==================================================================================================

Your own component is any function of that shape, named by where it lives: ``{name: "my_rewards.py:brevity",
params: {...}}`` (a file in the working directory or beside the recipe) or ``{name: "mypkg.rewards:brevity"}`` (an
importable module); see :func:`component_fn`. Its params are checked against its signature like the built-in ones'.

R-Search's total reward (spec 002 §4.4, Eq. 6: r = r_answer + r_evidence + r_format, with r_answer, r_evidence in
[0, 1] and r_format in {0, 0.2, 0.4}) is three components with weight 1::

    reward:
      components:
        - {name: answer,   weight: 1.0, params: {metric: f1}}
        - {name: evidence, weight: 1.0, params: {metric: f1}}
        - {name: format,   weight: 1.0, params: {paper: r_search, gamma: 0.2}}

so a rollout that searched, wrote one evidence block and one answer, with answer F1 0.5 and reader F1 1.0, gets
0.5 + 1.0 + 0.4 = 1.9 (the maximum is 2.4). R1-Searcher++'s Eq. 7 is likewise format + answer + group, each with
weight 1.
"""

from __future__ import annotations

import difflib
import inspect
import math
from collections import defaultdict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean
from typing import Any, Literal

from searchrl.config import RewardComponent, RewardConfig
from searchrl.config.extensions import load_object, split_file
from searchrl.protocols.base import FORMAT_SCHEMES
from searchrl.rewards.correctness import CORRECTNESS_PARAMS, Correctness
from searchrl.rewards.inputs import Reader, RewardInput, Scores
from searchrl.rewards.inputs import mean as _mean
from searchrl.rewards.inputs import rate as _rate
from searchrl.rewards.metrics import cover_em, normalize_answer
from searchrl.rewards.model_rewards import (
    READER_PROMPT,
    evidence_reward,
    generator_reader,
    judge_reward,
    reader_prompt,
)

__all__ = [
    "COMPONENTS",
    "READER_PROMPT",
    "Reader",
    "RewardComposer",
    "RewardInput",
    "RewardResult",
    "Scores",
    "answer_recall_reward",
    "answer_reward",
    "evidence_reward",
    "format_reward",
    "generator_reader",
    "group_reward",
    "hop_reward",
    "judge_reward",
    "reader_prompt",
    "retrieval_reward",
]

# --------------------------------------------------------------------------------------------------- answer


def answer_reward(
    inputs: Sequence[RewardInput],
    *,
    metric: str = "em",
    normalize: str | None = None,
    boundary: str | None = None,
    max_words: int | None = None,
    incorrect: float = 0.0,
) -> Scores:
    """The answer's ``metric`` score; 0 (or ``incorrect``) for a missing, wrong, or over-long answer.

    ``normalize`` (``squad``/``r1_searcher``/``rag_r1``) and ``boundary`` (cover_em only) are passed to
    :func:`searchrl.rewards.metrics.get_metric`. With ``max_words``, an answer of more whitespace-separated words
    scores as wrong. ``incorrect`` replaces a score of exactly 0 (R1-Searcher's EM/CEM ablation uses -1).
    """
    rule = Correctness(metric=metric, normalize=normalize, boundary=boundary, max_words=max_words)
    scores, raw_scores, too_long = [], [], []
    for inp in inputs:
        raw = rule.score(inp.answer, inp.golds)
        long = rule.too_long(inp.answer)
        score = 0.0 if long else raw
        raw_scores.append(raw)
        too_long.append(long)
        scores.append(incorrect if score == 0.0 else score)
    metrics = {
        metric: _mean(raw_scores),  # the metric before the length cap, for comparison with eval numbers
        "missing_rate": _rate([inp.answer is None for inp in inputs]),
    }
    if max_words is not None:
        metrics["too_long_rate"] = _rate(too_long)
    return scores, metrics


# --------------------------------------------------------------------------------------------------- format


def format_reward(inputs: Sequence[RewardInput], *, paper: str, **params: Any) -> Scores:
    """A paper's format reward over ``RewardInput.report``: the scheme ``paper`` names, registered by its protocol
    module (``searchrl.protocols.base.FORMAT_SCHEMES``), with that scheme's ``params``.

    - ``r1_searcher_stage1``: ``value`` (0.5) if ``report.ok`` and the answer is not empty (``require_answer``)
      else 0.
    - ``r1_searcher_stage2`` / ``r1_searcher_pp``: 0 if ``report.ok`` else ``penalty`` (-2).
    - ``r_search``: Eq. 5 with ``gamma`` (0.2), ``gamma_e``, ``gamma_a``, ``evidence_without_search``.
    - ``tool_call`` (ours): 0 if ``report.ok`` else ``penalty`` (-1).

    Metrics: ``ok_rate``, and ``<flag>_rate`` for each boolean ``<name>_ok`` flag the protocol's report carries.
    """
    if paper not in FORMAT_SCHEMES:
        none = paper in ("search_r1", "rag_r1")
        hint = " (Search-R1 and RAG-R1 have no format reward: drop the component)" if none else ""
        raise ValueError(f"format paper must be one of {', '.join(sorted(FORMAT_SCHEMES))}, got {paper!r}{hint}")
    scheme, check = FORMAT_SCHEMES[paper]
    allowed = list(inspect.signature(scheme).parameters)[3:]  # after (report, n_searches, evidence)
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ValueError(f"format paper {paper!r}: unknown param(s) {unknown}; valid params: {', '.join(allowed)}")
    if check is not None:
        check(**params)
    scores = [scheme(inp.report, inp.n_searches, inp.evidence, **params) for inp in inputs]
    metrics: dict[str, float] = {"ok_rate": _rate([inp.report.ok for inp in inputs])}
    flags = sorted(
        {k for inp in inputs for k, v in inp.report.extra.items() if k.endswith("_ok") and isinstance(v, bool)}
    )
    metrics.update({f"{k}_rate": _rate([bool(inp.report.extra.get(k)) for inp in inputs]) for k in flags})
    return scores, metrics


# --------------------------------------------------------------------------------------------------- retrieval


def retrieval_reward(inputs: Sequence[RewardInput], *, value: float = 0.5) -> Scores:
    """``value`` (0.5) if the rollout searched at least once, else 0 (R1-Searcher stage 1, Eq. 1)."""
    searched = [inp.n_searches >= 1 for inp in inputs]
    return [value if s else 0.0 for s in searched], {"searched_rate": _rate(searched)}


def answer_recall_reward(inputs: Sequence[RewardInput], *, value: float = 0.5) -> Scores:
    """Answer recall of the searches [O]: ``value`` (0.5) if a gold answer occurs (SQuAD-normalised, as whole
    words) in the documents the rollout retrieved, else 0. R1-Searcher's stage-1 retrieval reward pays for
    searching at all; this pays for searches that find the answer, so a rollout that searched the wrong entity
    earns nothing for it. Needs ``RewardInput.retrieved_text`` (the RL trainer fills it from the trajectory).

    Metrics: ``answer_recall_rate`` (share of rollouts whose documents held a gold answer).
    """
    found = []
    for inp in inputs:
        if inp.retrieved_text is None:
            raise ValueError(
                "reward component 'answer_recall' needs RewardInput.retrieved_text (the documents the rollout "
                "retrieved); build inputs with RewardInput.from_trajectory or pass retrieved_text"
            )
        found.append(bool(inp.golds) and cover_em(inp.retrieved_text, list(inp.golds)) == 1.0)
    return [value if f else 0.0 for f in found], {"answer_recall_rate": _rate(found)}


# --------------------------------------------------------------------------------------------------- hops


def hop_reward(inputs: Sequence[RewardInput], *, chain: str = "chain", key: str = "answer") -> Scores:
    """Process reward [O]: the fraction of the question's intermediate answers that the policy's own text states.

    The intermediate answers are ``metadata[chain][i][key]`` for the hops whose answer is not one of the golds
    (the last hop of a bridge question is the final answer, which the answer component scores). A hop counts when
    its SQuAD-normalized answer occurs as whole words in the normalized policy text (observations left out, so a
    document that merely contains it does not count). Comparison questions' hops (each entity's year or place) are
    all intermediate. A question without intermediate hops (single-hop) scores 0 in every rollout, which leaves
    group-relative advantages unchanged.

    Inputs need ``policy_text`` and ``metadata[chain]`` (the RL trainer fills both; the synthetic world records the
    chain); a question without the chain is an error: per-hop answers cannot be guessed.

    Metrics: ``hop_rate`` (mean score over questions with intermediate hops), ``with_hops_rate``.
    """
    scores: list[float] = []
    rated: list[float] = []
    for inp in inputs:
        hops = inp.metadata.get(chain)
        if not isinstance(hops, list) or not all(isinstance(h, Mapping) and key in h for h in hops):
            raise ValueError(
                f"reward component 'hops': question {inp.question[:60]!r} has no metadata.{chain}[].{key} "
                f"(per-hop answers); use data that records them (the synthetic world does) or drop the component"
            )
        if inp.policy_text is None:
            raise ValueError("reward component 'hops' needs RewardInput.policy_text (the policy's own text)")
        golds = {normalize_answer(g) for g in inp.golds}
        wanted = [normalize_answer(str(h[key])) for h in hops]
        wanted = [w for w in dict.fromkeys(wanted) if w and w not in golds]
        if not wanted:
            scores.append(0.0)
            continue
        score = sum(cover_em(inp.policy_text, [w]) for w in wanted) / len(wanted)
        scores.append(score)
        rated.append(score)
    return scores, {"hop_rate": _mean(rated), "with_hops_rate": len(rated) / len(inputs) if inputs else 0.0}


# --------------------------------------------------------------------------------------------------- group


def _std(xs: Sequence[int], ddof: int) -> float:
    if len(xs) <= ddof:
        return 0.0
    m = fmean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - ddof))


def group_reward(
    inputs: Sequence[RewardInput],
    *,
    metric: str = "cover_em",
    normalize: str | None = None,
    boundary: str | None = None,
    max_words: int | None = 10,
    scale: float = 2.0,
    eta: float = 2.0,
    sigma_over: Literal["all", "correct"] = "all",
    ddof: int = 0,
) -> Scores:
    """R1-Searcher++'s group reward (spec 000 §3.3, Eqs. 5-6).

    A rollout is *correct* when its answer scores exactly 1 under ``metric`` and has at most ``max_words`` words
    (the answer reward's rule, Eq. 4; the composer copies these params from the answer component when they are
    not given here). Within each group (same ``group_id``) let t_i be the search counts, t_min the fewest searches
    among correct rollouts, and sigma a standard deviation of search counts. Every correct rollout with
    t_i = t_min gets ``min(scale * sigma**2, eta)``; all others get 0.

    The paper defines sigma two ways: its formula takes the std of {t_1..t_n} over *all* rollouts of the group
    (``sigma_over="all"``, the default), its prose over the *correct* ones (``sigma_over="correct"``; with one
    correct rollout that sigma is 0, so a lone correct rollout never earns the bonus). Population (``ddof=0``,
    default) vs sample (``ddof=1``) std is not stated either.

    >>> from searchrl.protocols.base import FormatReport
    >>> rep = FormatReport(ok=True, has_answer=True, answer=None, n_searches=0)
    >>> group = [RewardInput("q", ["Paris"], "", a, rep, n, group_id=0)
    ...          for a, n in [("Paris", 1), ("Paris", 3), ("Lyon", 0), ("Paris", 1)]]
    >>> group_reward(group)[0]  # t = (1, 3, 0, 1): sigma^2 = 1.1875 over all four, bonus min(2.375, 2) = 2
    [2.0, 0.0, 0.0, 2.0]
    """
    if sigma_over not in ("all", "correct"):
        raise ValueError(
            f"group sigma_over must be 'all' (the paper's formula) or 'correct' (its prose), got {sigma_over!r}"
        )
    if ddof not in (0, 1):
        raise ValueError(f"group ddof must be 0 (population std) or 1 (sample std), got {ddof}")
    rule = Correctness(metric=metric, normalize=normalize, boundary=boundary, max_words=max_words)
    groups: dict[Hashable, list[int]] = defaultdict(list)
    for i, inp in enumerate(inputs):
        if inp.group_id is None:
            raise ValueError("the group reward needs RewardInput.group_id (rollouts of one question share it)")
        groups[inp.group_id].append(i)
    correct = [rule(inp.answer, inp.golds) for inp in inputs]
    scores = [0.0] * len(inputs)
    sigmas = []
    for members in groups.values():
        t = [inputs[i].n_searches for i in members]
        t_correct = [inputs[i].n_searches for i in members if correct[i]]
        sigma = _std(t if sigma_over == "all" else t_correct, ddof)
        sigmas.append(sigma)
        if not t_correct:
            continue
        bonus = min(scale * sigma**2, eta)
        t_min = min(t_correct)
        for i in members:
            if correct[i] and inputs[i].n_searches == t_min:
                scores[i] = bonus
    metrics = {
        "bonus_rate": _rate([s > 0 for s in scores]),
        "sigma_mean": _mean(sigmas),
        "correct_rate": _rate(correct),
    }
    return scores, metrics


# --------------------------------------------------------------------------------------------------- composer

COMPONENTS: dict[str, Callable[..., Scores]] = {
    "answer": answer_reward,
    "format": format_reward,
    "retrieval": retrieval_reward,
    "answer_recall": answer_recall_reward,
    "group": group_reward,
    "evidence": evidence_reward,
    "judge": judge_reward,
    "hops": hop_reward,
}


def component_label(name: str) -> str:
    """How a component's scores are logged (``reward/<label>``): its name, a file of yours by its file name only
    (``/home/me/exp/my_rewards.py:brevity`` -> ``my_rewards.py:brevity``), so logs do not depend on where it lives.

    >>> component_label("/home/me/exp/my_rewards.py:brevity"), component_label("answer")
    ('my_rewards.py:brevity', 'answer')
    """
    file, rest = split_file(name)
    return f"{Path(file).name}{rest}" if file and rest else name


def component_fn(name: str) -> Callable[..., Scores]:
    """The function of a reward component: one of :data:`COMPONENTS`, or your own
    ``fn(inputs, **params) -> (scores, metrics)`` named ``path/to/file.py:function`` or ``module:function``.

    >>> component_fn("answer") is answer_reward
    True
    """
    if name in COMPONENTS:
        return COMPONENTS[name]
    if ":" not in name:
        raise ValueError(
            f"unknown reward component {name!r}: use one of {', '.join(COMPONENTS)}, or your own function as "
            "'path/to/file.py:function' or 'module:function'"
        )
    fn = load_object(name, "reward component")
    if not callable(fn):
        raise ValueError(f"reward component {name!r}: {name.rpartition(':')[2]!r} is not a function")
    return fn


#: runtime objects (not config) a component takes; the composer passes them in.
_DEPENDENCIES = {"evidence": "reader", "judge": "judge"}
#: params the group reward inherits from the answer component, so "correct" means the same in both.
_SHARED_WITH_ANSWER = CORRECTNESS_PARAMS


@dataclass(frozen=True)
class RewardResult:
    total: list[float]  # weighted sum per input
    components: dict[str, list[float]]  # unweighted scores per component name
    metrics: dict[str, float]  # reward/total, reward/<name>, and <name>/<metric> from each component


class RewardComposer:
    """Sums weighted components; logs each one separately.

    Metrics: ``reward/total`` (mean total), ``reward/<name>`` (mean unweighted component score) and
    ``<name>/<key>`` for each component's own statistics. A component may appear once. A component is a
    ``RewardComponent`` or a mapping of its fields, as a recipe writes it: ``{"name": "answer", "params": {...}}``.
    """

    def __init__(
        self,
        components: Sequence[RewardComponent | Mapping[str, Any]],
        *,
        reader: Reader | None = None,
        judge: Any = None,
    ) -> None:
        components = [c if isinstance(c, RewardComponent) else RewardComponent.model_validate(c) for c in components]
        if not components:
            raise ValueError("reward.components is empty: add at least one component (e.g. {name: answer})")
        names = [c.name for c in components]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"reward component(s) {dupes} listed twice: merge them into one entry")
        answer = next((c for c in components if c.name == "answer"), None)
        # The answer component's effective params (its defaults filled in), which the group reward inherits.
        answer_params: dict[str, Any] = {}
        if answer is not None:
            defaults = inspect.signature(answer_reward).parameters
            answer_params = {k: answer.params.get(k, defaults[k].default) for k in _SHARED_WITH_ANSWER}
        deps = {"reader": reader, "judge": judge}
        self._steps: list[tuple[str, float, Callable[..., Scores], dict[str, Any]]] = []
        for comp in components:
            fn = component_fn(comp.name)
            params = dict(comp.params)
            if comp.name == "group":
                params = {**answer_params, **params}
            dep = _DEPENDENCIES.get(comp.name)
            sig = inspect.signature(fn).parameters
            allowed = [p for p, v in sig.items() if p not in ("inputs", dep) and v.kind != v.VAR_KEYWORD]
            unknown = sorted(set(params) - set(allowed))
            if unknown and not any(v.kind == v.VAR_KEYWORD for v in sig.values()):  # those check their own
                close = difflib.get_close_matches(unknown[0], allowed, n=1, cutoff=0.6)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ValueError(
                    f"reward component {comp.name!r}: unknown param(s) {unknown}{hint}; "
                    f"valid params: {', '.join(allowed)}"
                )
            if dep is not None:
                params[dep] = deps[dep]
            if comp.name in COMPONENTS:  # validates params (and dependencies) now rather than mid-run
                fn([], **params)
            self._steps.append((component_label(comp.name), comp.weight, fn, params))

    @classmethod
    def from_config(cls, cfg: RewardConfig, **deps: Any) -> RewardComposer:
        return cls(cfg.components, **deps)

    @property
    def names(self) -> list[str]:
        return [name for name, *_ in self._steps]

    def __call__(self, inputs: Sequence[RewardInput]) -> RewardResult:
        total = [0.0] * len(inputs)
        per_component: dict[str, list[float]] = {}
        metrics: dict[str, float] = {}
        for name, weight, fn, params in self._steps:
            out = fn(inputs, **params)
            if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], Mapping)):
                raise TypeError(
                    f"reward component {name!r} returned {type(out).__name__}; return a pair (scores, metrics): a "
                    "list with one float per input and a dict of metrics to log ({} for none)"
                )
            scores, comp_metrics = out
            if not isinstance(scores, Sequence) or len(scores) != len(inputs):
                got = f"{len(scores)} scores" if isinstance(scores, Sequence) else f"a {type(scores).__name__}"
                raise RuntimeError(f"reward component {name!r} returned {got} for {len(inputs)} inputs")
            bad = next((i for i, s in enumerate(scores) if isinstance(s, int | float) and not math.isfinite(s)), None)
            if bad is not None:  # it would turn the step's advantages, its loss and then the weights into NaN
                raise ValueError(
                    f"reward component {name!r} returned {scores[bad]} for input {bad} (question "
                    f"{inputs[bad].question[:60]!r}): return a finite number for every input (e.g. 0.0 where it "
                    "cannot score one)"
                )
            per_component[name] = scores
            total = [t + weight * s for t, s in zip(total, scores, strict=True)]
            metrics[f"reward/{name}"] = _mean(scores)
            metrics.update({f"{name}/{k}": v for k, v in comp_metrics.items()})
        metrics["reward/total"] = _mean(total)
        return RewardResult(total=total, components=per_component, metrics=metrics)
