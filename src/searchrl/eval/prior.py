"""``prior``: a baseline with no model and no retrieval, answering from the training questions' answers alone.

Multi-hop sets carry strong answer priors. A choice question ("..., A or B?") is right half the time by a guess, and
more when one position holds the gold more often; most yes/no questions of a set may have one answer. A trained
model can learn such a prior instead of the skill, and its score then says little about finding. ``prior``
measures the floor every method should clear on the same questions:

- a choice question: the option at the position (first or second) most often gold among the training choice
  questions;
- a yes/no question (asked with a leading auxiliary verb: "Is", "Are", "Did", ...): the training yes/no
  questions' more common answer;
- any other question: the most common training answer among open questions with the same wh-word (who, where,
  when, ...), else among all open questions.

The training answers come from ``evaluation.prior_data`` (a QA file; the recipes that split a QA file pass their
training split). The question forms are :mod:`searchrl.rewards.forms`'; at prediction the yes/no form is read from
the question alone, never from its gold answers. Ties go to the first position, "yes", and the answer seen first.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Sequence
from functools import cached_property

from searchrl.data.records import QAExample
from searchrl.eval.method import Method, Prediction
from searchrl.rewards.forms import choice_options, option_index, question_form
from searchrl.rewards.metrics import normalize_answer

_AUXILIARY = re.compile(
    r"^\s*(?:is|are|was|were|do|does|did|has|have|had|can|could|will|would|should|shall)\b", re.IGNORECASE
)
_WH = re.compile(r"\b(who|whom|whose|where|when|what|which|how|why)\b", re.IGNORECASE)


def asks_yes_no(question: str) -> bool:
    """A question that opens with an auxiliary verb and names no options: answered by yes or no.

    >>> asks_yes_no("Are both films from the same country?")
    True
    >>> asks_yes_no("Who directed Alien?")
    False
    """
    return bool(_AUXILIARY.match(question or ""))


def wh_word(question: str) -> str:
    """The question's first wh-word (lower case; "whom" and "whose" count as "who"), "" when it has none.

    >>> wh_word("Where was the director of film Alien born?"), wh_word("Whose son is Ali?"), wh_word("Name it.")
    ('where', 'who', '')
    """
    m = _WH.search(question or "")
    word = m.group(1).lower() if m else ""
    return "who" if word in ("whom", "whose") else word


class AnswerPrior:
    """The answer priors of a set of training questions (:func:`AnswerPrior.fit`), and the answer they give."""

    def __init__(self) -> None:
        self.positions: Counter[int] = Counter()  # choice questions: the gold's option index
        self.yes_no: Counter[str] = Counter()  # yes/no questions: "yes" / "no"
        self.open_by_wh: dict[str, Counter[str]] = {}  # open questions: normalised gold -> count, per wh-word
        self.surface: dict[str, str] = {}  # normalised gold -> its first written form
        self.questions: set[str] = set()  # the training questions (an evaluation of them is no held-out score)

    @classmethod
    def fit(cls, examples: Sequence[QAExample]) -> AnswerPrior:
        prior = cls()
        for ex in examples:
            prior.questions.add(ex.question.strip().lower())
            if not ex.answers:
                continue
            gold = str(ex.answers[0])
            form = question_form(ex.question, ex.answers)
            if form == "choice":
                hit = {option_index(ex.question, str(g)) for g in ex.answers} - {None}
                if len(hit) == 1:
                    prior.positions[hit.pop()] += 1
            elif form == "yes/no":
                prior.yes_no[next(a for a in (str(g).strip().lower() for g in ex.answers) if a in ("yes", "no"))] += 1
            else:
                key = normalize_answer(gold)
                if key:
                    prior.open_by_wh.setdefault(wh_word(ex.question), Counter())[key] += 1
                    prior.surface.setdefault(key, gold.strip())
        if not (prior.positions or prior.yes_no or prior.open_by_wh):
            raise ValueError("the prior has no training answers: give evaluation.prior_data a QA file with golds")
        return prior

    @cached_property
    def open_all(self) -> Counter[str]:
        """Every open question's answer counts, whatever its wh-word (the fallback of an unseen one)."""
        return sum(self.open_by_wh.values(), Counter())

    def answer(self, question: str) -> str | None:
        """The prior's answer to ``question`` (None when the training questions hold no answer of its form)."""
        options = choice_options(question)
        if options:
            best = max(sorted(self.positions), key=lambda i: self.positions[i], default=0)  # a tie: the lower
            return options[min(best, len(options) - 1)]
        if asks_yes_no(question):
            if not self.yes_no:
                return None
            return max(("yes", "no"), key=lambda a: self.yes_no[a])
        counts = self.open_by_wh.get(wh_word(question)) or self.open_all
        if not counts:
            return None
        return self.surface[counts.most_common(1)[0][0]]


class PriorMethod(Method):
    """Answers from :class:`AnswerPrior`: no model, no retrieval, no generated token."""

    name = "prior"

    def __init__(self, prior: AnswerPrior) -> None:  # no generator: nothing is generated
        self.prior = prior

    def answer(self, examples: Sequence[QAExample]) -> list[Prediction]:
        t0 = time.perf_counter()
        preds = [Prediction(self.prior.answer(e.question)) for e in examples]
        return self._stamp(preds, t0)


def prior_from_config(cfg, sets: Sequence = ()) -> AnswerPrior:
    """:class:`AnswerPrior` of ``evaluation.prior_data`` (a QA file, a split name or an ``hf:`` source); a warning
    for each evaluation set of ``sets`` whose questions it was fitted on."""
    from searchrl.eval.datasets import load_entry
    from searchrl.utils import console

    data = cfg.evaluation.prior_data
    if not data:
        raise ValueError(
            "method prior needs evaluation.prior_data (searchrl eval --prior-data): the training QA file whose "
            "answers it counts (e.g. evaluation.prior_data=train)"
        )
    prior = AnswerPrior.fit(load_entry(cfg, data)[1])
    for s in sets:
        if seen := sum(ex.question.strip().lower() in prior.questions for ex in s.examples):
            console.log(f"[yellow]warning:[/yellow] prior: {seen} of {s.name}'s questions are in its prior_data")
    return prior
