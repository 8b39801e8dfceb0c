"""The field names a QA row's parts go by in the datasets SearchRL reads, and ``fields=``: your own names for them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.markup import escape

from searchrl.config.base import FIELD_TARGETS
from searchrl.utils import console

#: ``golds`` before ``answer``: SearchRL's own records (trajectories, predictions) hold the model's answer there
ANSWER_FIELDS = ("golden_answers", "golds", "answer", "answers", "possible_answers")
# Other names of the question: BEIR-style ``query``, SimpleQA's and BrowseComp's ``problem``, KILT's ``input``, and a
# ``prompt`` string (Frames); the first present, as a string, is the question.
QUESTION_FIELDS = ("question", "query", "problem", "input", "prompt")
ID_FIELDS = ("id", "_id", "question_id", "questionid", "qid")
ALIAS_FIELDS = ("answer_aliases",)  # MuSiQue: more gold answers beside 'answer'
LIST_CELLS = {*ANSWER_FIELDS, *ALIAS_FIELDS}  # a CSV / TSV cell of these fields may hold a list


def mapped(row: dict[str, Any], fields: Mapping[str, str], where: str) -> dict[str, Any]:
    """``row`` with the fields ``fields`` names moved to the names the loader reads (the others as they are). A row
    without the named field but with the part under its own name (``question``, an answer field: a file SearchRL
    wrote from yours, or another set of the run) keeps that, and one without an id gets the default one."""
    usual = {"question": ("question",), "answers": ANSWER_FIELDS, "id": ID_FIELDS}  # not "prompt": often no question
    names = {str(f).lower() for f in row}
    missing = [v for k, v in fields.items() if v not in row and k != "id" and not names & set(usual[k])]
    if missing:
        raise ValueError(f"{where}: no field {missing[0]!r}, which fields= maps (found fields {sorted(row)})")
    named = {FIELD_TARGETS[k]: row[v] for k, v in fields.items() if v in row}
    return {**named, **{k: v for k, v in row.items() if k not in {*fields.values(), *named}}}


def note_question_field(row: dict[str, Any], where: str) -> bool:
    """Say once which field holds the question when it is not ``question`` and the row has more than one candidate
    (a ``prompt`` may be a system prompt, not the question); True once said, or when nothing needs saying."""
    if any(str(k).lower() == "question" for k in row) or "reward_model" in row:
        return True
    lower = {str(f).lower(): f for f in row}  # the loader reads the first of QUESTION_FIELDS a row has, in any case
    text = [lower[q] for q in QUESTION_FIELDS if q in lower and isinstance(row[lower[q]], str)][:1]
    skip = {*QUESTION_FIELDS, *ID_FIELDS, *ANSWER_FIELDS, *ALIAS_FIELDS}
    others = [str(f) for f in row if isinstance(row[f], str) and str(f).lower() not in skip]
    if text and others:
        console.log(
            f"note: {escape(where)}: the question is read from field {text[0]!r} (the rows have no 'question'); if "
            f"another field holds it ({escape(', '.join(others[:4]))}), name it with fields: {{question: NAME}}"
        )
    return True
