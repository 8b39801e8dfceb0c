"""Answer-metric and reward edge cases pinned with values worked out by hand: F1 counts repeated tokens as a
multiset, a blank prediction is missing, an example without golds earns no answer recall, R1-Searcher's True/False
mapping reads the unstripped string, a match next to a script without spaces may end at a space (or overlap an
earlier unbounded one), the group reward's sigma over no or one correct rollout, and a group component's own
correctness params win over the answer component's."""

from __future__ import annotations

import pytest

from searchrl.protocols.base import FormatReport
from searchrl.rewards.components import RewardComposer, RewardInput, answer_recall_reward, group_reward
from searchrl.rewards.metrics import contains_words, cover_em, exact_match, f1_score, normalize_answer_r1

REPORT = FormatReport(ok=True, has_answer=True, answer=None, n_searches=0)


def test_f1_counts_repeated_tokens_as_a_multiset() -> None:
    # pred: new york new york (4 tokens), gold: new york new york city (5): 4 in common -> P = 1, R = 4/5, F1 = 8/9
    # (as sets, 2 in common: P = 1/2, R = 2/5, F1 = 4/9)
    assert f1_score("New York, New York", ["New York New York City"]) == pytest.approx(8 / 9)


@pytest.mark.parametrize("metric", [exact_match, f1_score, cover_em])
def test_a_blank_prediction_is_missing_even_against_a_gold_that_normalises_to_empty(metric) -> None:
    assert metric("   ", ["The"]) == 0.0
    assert metric("\n\t", ["a"]) == 0.0


def test_r1_maps_true_and_false_only_as_written_unstripped() -> None:
    assert normalize_answer_r1("True") == "yes" and normalize_answer_r1("False") == "no"
    assert normalize_answer_r1(" True ") == "true" and normalize_answer_r1("True ") == "true"


def test_a_match_beside_an_unspaced_script_may_end_at_a_space() -> None:
    # before the match a Chinese character (a boundary of its own), after it a space
    assert contains_words("作者是bram stoker 先生", "bram stoker")
    assert contains_words("先生 bram stoker是作者", "bram stoker")
    assert not contains_words("作者是bram stokers 先生", "bram stoker")


def test_a_match_overlapping_an_earlier_unbounded_one_still_counts() -> None:
    # "a a" first occurs inside "ba a" (no boundary before it), then again two characters on, between a space and
    # a Chinese character (no plain " a a " anywhere, so only the scan past the first match finds it)
    assert contains_words("中ba a a中", "a a")


def _group(answers_searches: list[tuple[str, int]], gold: str = "Paris") -> list[RewardInput]:
    return [RewardInput("q", [gold], "", a, REPORT, n, group_id=0) for a, n in answers_searches]


@pytest.mark.parametrize("ddof", [0, 1])
def test_sigma_over_the_correct_rollouts_is_zero_with_none_or_one_correct(ddof: int) -> None:
    none = _group([("Lyon", 1), ("Nice", 3)])
    one = _group([("Paris", 1), ("Nice", 3), ("Lyon", 0)])
    for inputs in (none, one):
        scores, metrics = group_reward(inputs, sigma_over="correct", ddof=ddof)
        assert scores == [0.0] * len(inputs) and metrics["sigma_mean"] == 0.0


def test_a_group_components_own_word_cap_wins_over_the_answer_components() -> None:
    # answer: EM, no word cap; group: at most 2 words. "New York City" (3 words) is right for the answer reward but
    # not for the group's, so the group pays nothing. (With the answer's rule the group would pay: t = (1, 0),
    # sigma^2 = 0.25, bonus min(2 * 0.25, 2) = 0.5 to the correct rollout.)
    composer = RewardComposer(
        [{"name": "answer", "params": {"metric": "em"}}, {"name": "group", "params": {"max_words": 2}}]
    )
    result = composer(_group([("New York City", 1), ("Lyon", 0)], gold="New York City"))
    assert result.components["answer"] == [1.0, 0.0]
    assert result.components["group"] == [0.0, 0.0]


def test_answer_recall_without_golds_pays_nothing() -> None:
    # no gold answer to find (even in empty documents): no recall reward, and no error
    inputs = [RewardInput("q", [], "", "Paris", REPORT, 1, retrieved_text=text) for text in ("", "Paris is big")]
    assert answer_recall_reward(inputs) == ([0.0, 0.0], {"answer_recall_rate": 0.0})
