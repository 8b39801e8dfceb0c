"""Why an answer is wrong: failure types counted per evaluation item, from its record alone.

Each predictions row (``searchrl.eval.harness.item_row``) gets ``diagnostics``, a dict of flags:

``searched``
    the method made at least one search call.
``gold_in_docs``
    a gold answer occurs (normalised, word-bounded) in the text the method retrieved: the *answer recall* of its
    searches. None when the row carries no retrieved text (methods that do not search).
``reading_failure``
    the gold was in the retrieved text but the prediction is not an exact match: the documents held the answer and
    the model did not read it out.
``retrieval_failure``
    the method searched, the gold is in none of its documents, and the prediction is wrong.
``hallucinated_hop``
    a query names an entity that appears neither in the question nor in any document retrieved before that query:
    the model searched for something it made up. Entities are runs of capitalised words and numbers in the query
    (the first word of the query counts only when it is not a question word). Lower-case queries have no entities
    under this rule, so the count is a lower bound.
``no_search``
    an agent (a method that may search) answered without searching.
``format_failure``
    no answer could be extracted, or the protocol's own format check failed.
``hedged``
    a choice question ("Who was born first, A or B?") whose prediction names more than one of its options. Cover-EM
    (the gold occurs in the prediction) credits such an answer whichever option is right, so a reply that restates
    the question scores as if it had chosen. Options are read from the question's last "A or B" after a comma (see
    :func:`choice_options`); choice questions worded otherwise are not detected, so the count is a lower bound.
    None for a question that offers no options.

Derived score: :func:`committed_cover_em` is cover-EM with a hedged answer counted wrong (``cover_em_committed``
in the evaluation summaries, "cover-EM (committed)"), the containment score that a restated question cannot earn.

:func:`failure_shares` turns the flags of many rows into shares per (dataset, method), the figures the summary
tables show.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from searchrl.eval.report import md_cell
from searchrl.rewards.forms import choice_options
from searchrl.rewards.metrics import contains_words, cover_em, exact_match, normalize_answer

FLAGS = (
    "gold_in_docs",
    "reading_failure",
    "retrieval_failure",
    "hallucinated_hop",
    "no_search",
    "format_failure",
    "hedged",
)
LABELS = {
    "gold_in_docs": "gold in docs",
    "reading_failure": "reading fail",
    "retrieval_failure": "retrieval fail",
    "hallucinated_hop": "made-up hop",
    "no_search": "no search",
    "format_failure": "format fail",
    "hedged": "hedged",
}
DIAGNOSTICS_NOTE = (
    "Why answers are wrong (share of all questions, right answers included; `gold in docs` over the questions that "
    "retrieved text, `reading fail` and `retrieval fail` count wrong answers only): the gold "
    "answer in the retrieved documents, a wrong answer although the documents held it (reading), a wrong answer "
    "after searches that missed it (retrieval), a query naming an entity found in neither the question nor the "
    "documents before it (made-up hop), an agent that never searched, no extractable answer or a broken format, "
    'and an answer to a choice question ("..., A or B?") naming more than one option (hedged; over the choice '
    "questions)."
)
_QUESTION_WORDS = set(
    "who what when where which why how whose whom is are was were did does do the a an in of find search list".split()
)
_WORD = re.compile(r"[A-Za-z0-9][\w'’.-]*")


def query_entities(query: str) -> list[str]:
    """Runs of capitalised words (and numbers) in a query: ``"Who wrote The Silent Tide in 1990"`` ->
    ``["The Silent Tide", "1990"]``."""
    words = _WORD.findall(query)
    runs: list[list[str]] = []
    current: list[str] = []
    for i, w in enumerate(words):
        capital = w[0].isupper() or w[0].isdigit()
        if capital and not (i == 0 and w.lower() in _QUESTION_WORDS):
            current.append(w)
            continue
        if current:
            runs.append(current)
        current = []
    if current:
        runs.append(current)
    return [" ".join(r).rstrip(".") for r in runs]


def names_options(prediction: str | None, options: Sequence[str]) -> int:
    """How many of ``options`` the prediction names (normalised, word-bounded). An option inside a longer named
    option is not counted twice: naming "The Tide Returns" does not also name "The Tide"."""
    text = f" {normalize_answer(prediction or '')} "
    named = 0
    for option in sorted((normalize_answer(o) for o in options), key=len, reverse=True):
        if f" {option} " in text:
            named += 1
            text = text.replace(f" {option} ", " | ")
    return named


#: the derived score's name in a row's ``metrics`` and in the summaries.
COMMITTED = "cover_em_committed"


def committed_cover_em(cover: float | None, diagnostics: Mapping[str, Any]) -> float | None:
    """Cover-EM with a hedged answer (one naming several options of a choice question) counted wrong."""
    if cover is None:
        return None
    return 0.0 if diagnostics.get("hedged") else cover


def add_diagnostics(row: dict[str, Any]) -> None:
    """Set ``row["diagnostics"]`` (:func:`diagnose`) and, when the row has a cover-EM score, its committed one."""
    row["diagnostics"] = diagnose(row)
    metrics = row.get("metrics")
    if isinstance(metrics, dict) and "cover_em" in metrics:
        metrics[COMMITTED] = committed_cover_em(metrics["cover_em"], row["diagnostics"])


def with_committed(score_names: Sequence[str]) -> list[str]:
    """Score names with :data:`COMMITTED` right after ``cover_em`` (when cover-EM is scored)."""
    out: list[str] = []
    for name in score_names:
        out.append(name)
        if name == "cover_em" and COMMITTED not in score_names:
            out.append(COMMITTED)
    return out


def _present(entity: str, normalized_text: str) -> bool:
    target = normalize_answer(entity)
    return not target or contains_words(normalized_text, target)


def _searches(trajectory: Mapping[str, Any] | None) -> list[tuple[list[str], str]]:
    """``(queries, text retrieved for them)`` per search call, in order, from an agent trajectory (its turns'
    observations, after the documents retrieved with the question into the prompt under the ``rag`` protocol) or a
    retrieval trace (``queries`` and ``docs``)."""
    if not isinstance(trajectory, Mapping):
        return []
    if "turns" in trajectory:
        prompt_docs = (trajectory.get("metadata") or {}).get("prompt_docs")
        first = [([str(trajectory.get("question") or "")], "\n".join(map(str, prompt_docs)))] if prompt_docs else []
        return first + [
            (list(t.get("queries") or []), str(t.get("observation") or ""))
            for t in trajectory["turns"]
            if t.get("action") == "search" and t.get("queries")
        ]
    if trajectory.get("docs") is not None:  # a RAG method's trace: its documents (and queries, when it records them)
        return [(list(trajectory.get("queries") or []), "\n".join(str(d) for d in trajectory["docs"]))]
    return []


def diagnose(row: Mapping[str, Any], *, may_search: bool | None = None) -> dict[str, bool | None]:
    """The failure flags of one predictions row (see the module docstring).

    ``may_search`` says whether the method could have searched (agent methods); by default a row whose trajectory
    has turns is an agent's.
    """
    golds = list(row.get("golds") or [])
    prediction = row.get("prediction")
    trajectory = row.get("trajectory")
    searches = _searches(trajectory)
    n_searches = int(row.get("searches") or len(searches))
    if may_search is None:  # an agent's trajectory has turns; the reason / rag baselines' protocols never search
        from searchrl.protocols import PROTOCOLS

        protocol = PROTOCOLS.get(str(trajectory.get("protocol"))) if isinstance(trajectory, Mapping) else None
        has_turns = isinstance(trajectory, Mapping) and "turns" in trajectory
        may_search = has_turns and (protocol is None or protocol.searches)
    agent = may_search
    correct = bool(golds) and exact_match(prediction, golds) == 1.0
    docs = "\n".join(text for _, text in searches)
    gold_in_docs = bool(golds) and cover_em(docs, golds) == 1.0 if searches else None
    seen = normalize_answer(str(row.get("question") or ""))
    hallucinated = False
    for queries, text in searches:
        for q in queries:
            if any(not _present(e, seen) for e in query_entities(q)):
                hallucinated = True
        seen = f"{seen} {normalize_answer(text)}"
    options = choice_options(str(row.get("question") or ""))
    return {
        "searched": n_searches > 0,
        "gold_in_docs": gold_in_docs,
        "reading_failure": bool(gold_in_docs) and not correct,
        "retrieval_failure": n_searches > 0 and gold_in_docs is False and not correct,
        "hallucinated_hop": hallucinated,
        "no_search": agent and n_searches == 0,
        "format_failure": prediction is None or row.get("well_formed") is False,
        "hedged": names_options(prediction, options) > 1 if options else None,
    }


def failure_shares(rows: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], dict[str, float | None]]:
    """Share of rows with each flag, per ``(dataset, method)``. ``gold_in_docs`` is over the rows that retrieved
    text; a flag no row could have (e.g. ``gold_in_docs`` for a method that never searches) is None."""
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for r in rows:
        groups.setdefault((str(r.get("dataset")), str(r.get("method"))), []).append(r)
    return {key: flag_shares([r.get("diagnostics") or diagnose(r) for r in group]) for key, group in groups.items()}


def flag_shares(flags: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    """Share of each failure flag among the flag dicts where it applies (not None); None where it never does."""
    shares: dict[str, float | None] = {}
    for name in FLAGS:
        values = [f.get(name) for f in flags if f.get(name) is not None]
        shares[name] = sum(bool(v) for v in values) / len(values) if values else None
    return shares


def shares_table(shares: Mapping[tuple[str, str], Mapping[str, float | None]], datasets: Sequence[str]) -> list[str]:
    """Markdown lines: one row per (dataset, method), one column per failure type, in percent."""
    lines = [
        "| dataset | method | " + " | ".join(LABELS[f] for f in FLAGS) + " |",
        "|---|---|" + "---|" * len(FLAGS),
    ]
    order = {d: i for i, d in enumerate(datasets)}
    for (dataset, method), s in sorted(shares.items(), key=lambda kv: (order.get(kv[0][0], len(order)), kv[0][1])):
        cells = ["" if s.get(f) is None else f"{100 * s[f]:.0f}%" for f in FLAGS]
        lines.append(f"| {md_cell(dataset)} | {md_cell(method)} | " + " | ".join(cells) + " |")
    return lines
