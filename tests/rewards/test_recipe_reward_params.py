"""Reward params that only the paper recipes set, checked through each recipe's own composer: R1-Searcher++'s group
sigma over every rollout of the group (its Eq. 5 as written), R1-Searcher stage 2's answer F1 under R1-Searcher's
normalisation."""

from __future__ import annotations

import pytest

from searchrl.config import load_config
from searchrl.protocols.base import FormatReport
from searchrl.rewards.components import RewardComposer, RewardInput

OK = FormatReport(ok=True, has_answer=True, answer=None, n_searches=0)


def test_r1_searcher_pp_takes_sigma_over_every_rollout_of_the_group() -> None:
    # one correct rollout (1 search) beside two wrong ones (0 and 2): t = (1, 0, 2), population variance 2/3, so the
    # bonus is min(2 * 2/3, 2) = 4/3 (sigma over the correct rollouts alone would be 0: no bonus)
    composer = RewardComposer.from_config(load_config("r1_searcher_pp").reward)
    rows = [RewardInput("q", ["Paris"], "", a, OK, n, group_id=0) for a, n in [("Paris", 1), ("Lyon", 0), ("Nice", 2)]]
    result = composer(rows)
    assert result.components["group"] == pytest.approx([4 / 3, 0.0, 0.0])
    assert result.total == pytest.approx([1 + 4 / 3, 0.0, 0.0])


def test_r1_searcher_stage2_scores_f1_under_r1_searchers_normalisation() -> None:
    # "Miller v._California": R1-Searcher's normalisation spaces the "._" (miller v california: F1 1 against the
    # gold); SQuAD's deletes it (miller vcalifornia: 1 token of 2 and of 3 in common, F1 0.4)
    composer = RewardComposer.from_config(load_config("r1_searcher_stage2").reward)
    result = composer([RewardInput("q", ["Miller v. California"], "", "Miller v._California", OK, 1)])
    assert result.components["answer"] == [1.0]
