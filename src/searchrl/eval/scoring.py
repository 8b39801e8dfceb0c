"""How answers are scored: each protocol's evaluation convention (its answer normalisation and cover-EM boundary),
and the metric functions an evaluation's settings name."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from searchrl.protocols import PROTOCOLS, Protocol
from searchrl.rewards.metrics import MetricFn, get_metric

#: each method's own evaluation code, by protocol: (normalisation, cover_em boundary). Search-R1's ``qa_em.py``:
#: SQuAD EM and a plain-substring ``subem_check``; R1-Searcher's ``metric_calc_rule.py``: its own normalisation,
#: token cover (ACC_R) and a substring cover; R1-Searcher++ evaluates with FlashRAG (SQuAD, substring ``acc``);
#: R-Search's code: SQuAD EM/F1 (its unreported Acc is a substring test on the lower-cased raw strings; SQuAD
#: substring here); RAG-R1's ``eval.py``: punctuation as spaces, no True/False mapping, EM only; Search-o1 is a
#: baseline here and tool_call our own protocol (SQuAD, word-bounded cover); the trained baselines' reason and rag
#: protocols are Search-R1's, scored like its agent.
EVAL_CONVENTIONS: dict[str, tuple[str, str]] = {
    "search_r1": ("squad", "char"),
    "r1_searcher": ("r1_searcher", "char"),
    "r1_searcher_pp": ("squad", "char"),
    "r_search": ("squad", "char"),
    "rag_r1": ("rag_r1", "word"),
    "search_o1": ("squad", "word"),
    "tool_call": ("squad", "word"),
    "reason": ("squad", "char"),  # Search-R1's trained baselines: scored as Search-R1 scores its agent
    "rag": ("squad", "char"),
}
#: each metric's own normalisation when nothing else is asked for (cover_em_tokens is R1-Searcher's ACC_R).
_METRIC_DEFAULT_NORMALIZE = {"cover_em_tokens": "r1_searcher"}


def metric_settings(
    metrics: Sequence[str], normalize: str = "auto", boundary: str = "auto", protocol: str | None = None
) -> dict[str, dict[str, str]]:
    """``{metric: {"normalize": ..., ["boundary": ...]}}``: what each score of an evaluation table means.

    ``auto`` takes the protocol's convention (:func:`convention`: the method's own evaluation code), or each
    metric's default without a protocol (SQuAD, word-bounded cover, R1-Searcher's for ``cover_em_tokens``). Under
    ``auto``, ``cover_em_tokens`` keeps R1-Searcher's normalisation, which defines that metric.

    >>> metric_settings(["em", "cover_em", "cover_em_tokens"], protocol="search_r1")
    {'em': {'normalize': 'squad'}, 'cover_em': {'normalize': 'squad', 'boundary': 'char'}, \
'cover_em_tokens': {'normalize': 'r1_searcher'}}
    """
    explicit = normalize != "auto" and boundary != "auto"  # the protocol's convention is not needed
    conv_norm, conv_boundary = convention(protocol) if protocol is not None and not explicit else ("squad", "word")
    out: dict[str, dict[str, str]] = {}
    for m in metrics:
        if normalize != "auto":
            norm = normalize
        else:
            norm = _METRIC_DEFAULT_NORMALIZE.get(m, conv_norm)
        out[m] = {"normalize": norm}
        if m == "cover_em":
            out[m]["boundary"] = conv_boundary if boundary == "auto" else boundary
    return out


def metric_functions(settings: Mapping[str, Mapping[str, str]]) -> dict[str, MetricFn]:
    """The scoring functions of :func:`metric_settings`' output."""
    return {m: get_metric(m, normalize=s["normalize"], boundary=s.get("boundary")) for m, s in settings.items()}


def check_metrics(metrics: Sequence[str]) -> list[str]:
    """Validate metric names (``judge`` is added by the harness, not listed here)."""
    names = [m for m in metrics if m != "judge"]
    if not names:
        raise ValueError("no metrics: set evaluation.metrics, e.g. [em, f1, cover_em, cover_em_tokens]")
    for m in names:
        get_metric(m)  # raises a ValueError naming the valid metrics
    return names


def convention(protocol: str) -> tuple[str, str]:
    """(normalisation, cover-EM boundary) of a protocol's answers: its entry of :data:`EVAL_CONVENTIONS`; for a
    registered protocol of your own, the ``eval_convention`` its class sets, else the entry of the built-in protocol
    it subclasses (a Search-R1 variant is scored as Search-R1), else the class default."""
    if protocol in EVAL_CONVENTIONS:
        return EVAL_CONVENTIONS[protocol]
    if protocol in PROTOCOLS:
        builtin = {cls: name for name, cls in PROTOCOLS.items() if name in EVAL_CONVENTIONS}
        for cls in PROTOCOLS[protocol].__mro__:
            if "eval_convention" in vars(cls) and cls.__module__ != Protocol.__module__:
                return cls.eval_convention
            if cls in builtin:
                return EVAL_CONVENTIONS[builtin[cls]]
        return PROTOCOLS[protocol].eval_convention
    raise ValueError(
        f"unknown protocol {protocol!r}, so no scoring convention: load the plugin that registers it (plugins:, "
        "or eval rescore --plugin FILE), or give the rule (--normalize and --boundary; from Python "
        "metric_settings(metrics, 'squad', 'word'))"
    )


def scoring_note(settings: Mapping[str, Mapping[str, str]], metrics: Sequence[str]) -> str:
    """One markdown line saying how each score was normalised (and cover_em's boundary)."""
    parts = []
    for m in metrics:
        s = settings[m]
        extra = f", {s['boundary']} boundary" if "boundary" in s else ""
        parts.append(f"{m}: {s['normalize']}{extra}")
    return "Answer normalisation: " + "; ".join(parts) + "."
