"""R-Search (Zhao et al. 2025; spec 002): search / observation, a global evidence block, then the answer.

No ``<think>`` tag: the model explains its thinking in free text before each step (spec 002 §2.1). It searches with
``<search> query </search>``, gets documents inside ``<observation> ... </observation>``, and when ready writes
one ``<original_evidence> ... </original_evidence>`` block with the relevant original text from all observations
(omitted when it never searched), followed by ``<answer> ... </answer>`` (§2.1-2.4). The evidence text feeds the
evidence reward: a frozen reader of another model family answers from it (§4.2).

Prompt: our own wording of the system template (Table 1), question as the user turn (as in the authors' code,
§2.2); without a chat template the two are joined by a newline, as that code does. Observation layout
(§2.6 [CODE]): ``"\\n\\n<observation>" + docs.strip() + "</observation>\\n\\n"`` with one
``"(Title: \"{title}\") {text}\\n"`` per document (quoted, as Table 8 shows). Parsing as Search-R1
(first complete ``<search>``/``<answer>``).
"""

from __future__ import annotations

import re
from typing import Literal

from searchrl.protocols._tags import Event, TagProtocol, blocks, count_tag, quoted_title, unanswered_searches
from searchrl.protocols.base import FormatReport, format_scheme
from searchrl.retrieval.base import Hit

SEARCH = ("<search>", "</search>")
OBSERVATION = ("<observation>", "</observation>")
EVIDENCE = ("<original_evidence>", "</original_evidence>")
ANSWER = ("<answer>", "</answer>")

SYSTEM_PROMPT = (
    "You are a helpful assistant that works through the given question step by step. Begin every step by "
    "explaining your thinking. When you need more information, write a specific query between <search> and "
    "</search>; the system will return the top search results between <observation> and </observation>. You may "
    "search as many times as you need. Once you know the final answer, put all the possibly relevant original "
    "information from the observations between <original_evidence> and </original_evidence>, complete and in its "
    "original wording, without changes. If you did not search and saw no observations, leave the evidence section "
    "out. Last, give the final answer between <answer> and </answer>."
)


class RSearchProtocol(TagProtocol):
    name = "r_search"
    stop_strings = ("</search>",)
    answer_stop_strings = ("</answer>",)
    search_tags = SEARCH
    result_tags = OBSERVATION
    answer_tags = ANSWER
    other_tags = EVIDENCE
    document_start = re.compile(rf"(?m)(?:^|(?<={re.escape(OBSERVATION[0])}))\(Title: ")

    def system_prompt(self) -> str:
        return SYSTEM_PROMPT

    def instruction(self, question: str) -> str:
        return question.strip()

    def raw_prompt(self, question: str) -> str:
        # as the authors' code joins the two messages for a tokenizer without a chat template
        return f"{SYSTEM_PROMPT}\n{question.strip()}"

    def format_search(self, queries: list[str] | tuple[str, ...]) -> str:
        return f"<search> {queries[0]} </search>"

    def format_answer(self, answer: str) -> str:
        return f"<answer> {answer} </answer>"

    def format_evidence(self, evidence: str) -> str:
        """The evidence block as the model should write it before its answer."""
        return f"{EVIDENCE[0]}{evidence}{EVIDENCE[1]}"

    def marked_blocks(self) -> dict[str, tuple[str, str]]:
        return {"evidence": EVIDENCE}

    def render_observation(self, queries: list[str], hits: list[list[Hit]]) -> str:
        hits = self._prepared(queries, hits)
        docs = "".join(f"(Title: {quoted_title(h)}) {h.text}\n" for h in hits[0]).strip()
        return f"\n\n{OBSERVATION[0]}{docs}{OBSERVATION[1]}\n\n"

    def _feedback_how(self) -> str:
        return (
            "To search, I should write the query between <search> and </search>; to finish, I should give the "
            "evidence from my searches between <original_evidence> and </original_evidence> (none if I did not "
            "search) and then the final answer between <answer> and </answer>."
        )

    def force_answer_text(self) -> str:
        return (
            "\n\nI have used up my searches. I will now gather the evidence between <original_evidence> and "
            "</original_evidence> and then give the final answer between <answer> and </answer>.\n\n"
        )

    def check_format(self, response: str) -> FormatReport:
        """The indicators of R-Search's format reward (spec 002 §4.3, Eq. 5).

        r_f = (1 - I_S)(g_e + g_a I_A) + I_S (g_e I_E + g_a I_A), with g_e = g_a = 0.2:

        * ``extra["searched"]`` = I_S: at least one search call answered by an inserted observation.
        * ``extra["answer_ok"]`` = I_A: exactly one ``<answer>`` and one ``</answer>`` tag in the response,
          forming one non-empty block ("exactly one box").
        * ``extra["evidence_ok"]`` = I_E: exactly one ``<original_evidence>`` and one closing tag, forming one
          non-empty block that spans no inserted observation (one opened before a search and closed after its
          documents is not the one box after the searches; its own text still goes to ``extra["evidence"]``).
        * ``extra["evidence_without_search"]``: a complete evidence block (empty or not) although nothing was
          searched. Eq. 5 still grants g_e then; the authors' code withholds it (stricter) — a reward can choose
          with this flag. As in that code, a lone or unclosed evidence tag is not a block.

        ``ok`` = full format reward under Eq. 5: I_A and (I_E if I_S). ``extra["evidence"]`` = text of the last
        complete evidence block (stripped; what the evidence reward's reader sees, as in the code) or None;
        ``extra["has_evidence"]``, ``extra["evidence_before_answer"]`` (the last evidence block closes before the
        last answer block opens), ``extra["n_fabricated_observations"]`` (observation tags the policy wrote).
        ``answer`` = last complete answer block (stripped).
        """
        events = self.scan_response(response)
        n_searches = sum(1 for ev in events if ev.kind.startswith("obs"))
        searched = n_searches >= 1
        answers = blocks(events, *ANSWER, across_documents=False)
        evidence_blocks = blocks(events, *EVIDENCE)
        answer = answers.contents[-1].strip() if answers.contents else None
        evidence = evidence_blocks.contents[-1].strip() if evidence_blocks.contents else None
        answer_ok = (
            count_tag(events, ANSWER[0]) == 1
            and count_tag(events, ANSWER[1]) == 1
            and len(answers.contents) == 1
            and bool(answer)
        )
        evidence_ok = (
            count_tag(events, EVIDENCE[0]) == 1
            and count_tag(events, EVIDENCE[1]) == 1
            and len(blocks(events, *EVIDENCE, across_documents=False).contents) == 1  # no observation inside
            and bool(evidence)
        )
        problems: list[str] = []
        if not answer_ok:
            problems.append("the response needs exactly one non-empty <answer> block")
        if searched and not evidence_ok:
            problems.append("after searching, the response needs exactly one non-empty <original_evidence> block")
        return FormatReport(
            ok=not problems,
            has_answer=answer is not None,
            answer=answer,
            n_searches=n_searches,
            problems=tuple(problems),
            extra={
                "searched": searched,
                "answer_ok": answer_ok,
                "evidence_ok": evidence_ok,
                "has_evidence": evidence is not None,
                "evidence": evidence,
                "evidence_without_search": bool(evidence_blocks.contents) and not searched,
                "evidence_before_answer": _evidence_before_answer(events),
                "n_unanswered_searches": unanswered_searches(events, SEARCH[1]),
                "n_fabricated_observations": count_tag(events, OBSERVATION[0]),
            },
        )


def _evidence_before_answer(events: list[Event]) -> bool:
    last_evidence_close = last_answer_open = -1
    for i, ev in enumerate(events):
        if ev.kind == "tag" and ev.value == EVIDENCE[1]:
            last_evidence_close = i
        elif ev.kind == "tag" and ev.value == ANSWER[0]:
            last_answer_open = i
    return 0 <= last_evidence_close < last_answer_open


# -------------------------------------------------------------------------------------------- format reward


def _flag(report: FormatReport, key: str) -> bool:
    if key not in report.extra:
        raise ValueError(
            f"the r_search format reward needs FormatReport.extra[{key!r}] (set by the r_search protocol's "
            f"check_format); this report has {sorted(report.extra)}: use rollout.protocol r_search"
        )
    return bool(report.extra[key])


def _check(
    *,
    gamma: float = 0.2,
    gamma_e: float | None = None,
    gamma_a: float | None = None,
    evidence_without_search: str = "paper",
) -> None:
    if evidence_without_search not in ("paper", "code"):
        raise ValueError(f"format evidence_without_search must be 'paper' or 'code', got {evidence_without_search!r}")


@format_scheme("r_search", check=_check)
def r_search_format(
    report: FormatReport,
    n_searches: int,
    evidence: str | None,
    *,
    gamma: float = 0.2,
    gamma_e: float | None = None,
    gamma_a: float | None = None,
    evidence_without_search: Literal["paper", "code"] = "paper",
) -> float:
    """R-Search's Eq. 5 (spec 002 §4.3): ``(1 - I_S)(g_e + g_a I_A) + I_S (g_e I_E + g_a I_A)``.

    I_S = searched at least once, I_A = ``extra["answer_ok"]`` (exactly one non-empty answer block), I_E =
    ``extra["evidence_ok"]`` (exactly one non-empty evidence block). ``gamma`` (0.2) sets both g_e and g_a unless
    ``gamma_e``/``gamma_a`` are given. Eq. 5 grants g_e whenever there was no search
    (``evidence_without_search="paper"``); the authors' code withholds it when an evidence block was written without
    any search (``"code"``; read from ``extra["evidence_without_search"]``, else from ``evidence``).
    """
    g_e = gamma if gamma_e is None else gamma_e
    g_a = gamma if gamma_a is None else gamma_a
    i_a, i_e = _flag(report, "answer_ok"), _flag(report, "evidence_ok")
    if n_searches > 0:
        return g_e * i_e + g_a * i_a
    flag = report.extra.get("evidence_without_search")
    wrote_evidence = bool(flag) if flag is not None else bool(evidence and evidence.strip())
    return g_e * (evidence_without_search == "paper" or not wrote_evidence) + g_a * i_a
