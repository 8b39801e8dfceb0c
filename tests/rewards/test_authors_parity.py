"""Our metrics against the papers' own scoring code, on tricky answers.

Every expected value below was obtained by running the authors' functions on the case (their code is not vendored
here), so a change to a normalisation or a metric that breaks parity with a paper's numbers fails this table:

- Search-R1 ``verl/utils/reward_score/qa_em.py`` (also RAG-R1's training reward): ``em_check``, ``subem_check``;
- FlashRAG ``flashrag/evaluator/metrics.py``: ``F1_Score`` (R1-Searcher++ and Search-R1 evaluations);
- R1-Searcher ``evaluation/metric_calc_rule.py`` (max over golds): ``exact_match_score``, ``f1_score``,
  ``cover_exact_match_score_1`` (ACC_R) and ``cover_exact_match_score_2``;
- R-Search ``verl/utils/reward_score/qa_f1.py``: ``F1_check`` (rounded to 2 decimals there, not here);
- RAG-R1 ``evaluation/eval.py``: ``normalize_answer(pred) == normalize_answer(gold)``.

Where our metrics knowingly differ (a missing prediction and a gold that normalises to "" score 0 here; see
``searchrl.rewards.metrics``) no case is listed.
"""

from __future__ import annotations

import pytest

from searchrl.rewards.metrics import (
    cover_em,
    cover_em_tokens,
    exact_match,
    f1_score,
    normalize_answer_r1,
    normalize_answer_rag_r1,
    token_f1,
)

# prediction, golds, | Search-R1 EM, subEM | FlashRAG F1 | R1-Searcher EM, F1, CEM-1, CEM-2 | R-Search F1 | RAG-R1 EM
AUTHORS = [
    ("The Paris.", ["paris"], 1, 1, 1.0, 1, 1.0, 1, 1, 1.0, 1),
    ("the city of Paris", ["Paris"], 0, 1, 0.5, 0, 0.5, 1, 1, 0.5, 0),
    ("Paris, Texas", ["Paris", "Texas Paris"], 0, 1, 1.0, 0, 1.0, 1, 1, 1.0, 0),
    ("yes it is", ["yes"], 0, 1, 0, 0, 0, 1, 1, 0.5, 0),
    ("Yes, both are American", ["yes"], 0, 1, 0, 0, 0, 1, 1, 0.4, 0),
    ("no", ["No"], 1, 1, 1.0, 1, 1.0, 1, 1, 1.0, 1),
    ("True", ["yes"], 0, 0, 0, 1, 1.0, 1, 1, 0.0, 0),
    ("False", ["no"], 0, 0, 0, 1, 1.0, 1, 1, 0.0, 0),
    (" False ", ["no"], 0, 0, 0, 0, 0, 0, 0, 0.0, 0),
    ("noanswer", ["no answer"], 0, 0, 0, 0, 0, 0, 0, 0.0, 0),
    ("1,000", ["1000"], 1, 1, 1.0, 0, 0, 0, 0, 1.0, 0),
    ("born in 1990", ["19"], 0, 1, 0, 0, 0, 0, 1, 0.0, 0),
    ("Martin", ["art"], 0, 1, 0, 0, 0, 0, 1, 0.0, 0),
    ("Jean-Paul Sartre", ["Jean Paul Sartre"], 0, 0, 0.4, 1, 1.0, 1, 1, 0.4, 1),
    ("Miller v._California", ["Miller v. California"], 0, 0, 0.4, 1, 1.0, 1, 1, 0.4, 1),
    ("California v. Miller", ["Miller v. California"], 0, 0, 1.0, 0, 1.0, 1, 0, 1.0, 0),
    ("O’Brien", ["O'Brien"], 0, 0, 0, 1, 1.0, 1, 1, 0.0, 1),
    ("`Hamlet`", ["Hamlet"], 1, 1, 1.0, 1, 1.0, 1, 1, 1.0, 1),
    ("ZÜRICH", ["zürich"], 1, 1, 1.0, 1, 1.0, 1, 1, 1.0, 1),
    ("Zurich", ["Zürich"], 0, 0, 0, 0, 0, 0, 0, 0.0, 0),
    ("北京 Beijing", ["北京"], 0, 1, 2 / 3, 0, 2 / 3, 1, 1, 0.67, 0),
    ("New York New York", ["New York"], 0, 1, 2 / 3, 0, 2 / 3, 1, 1, 0.67, 0),
    ("U.S.A.", ["USA", "United States"], 1, 1, 1.0, 0, 0, 0, 0, 1.0, 0),
    ("a b a", ["a b"], 1, 1, 1.0, 1, 1.0, 1, 1, 1.0, 1),
    ("rock_and_roll", ["rock and roll"], 0, 0, 0, 1, 1.0, 1, 1, 0.0, 1),
]


@pytest.mark.parametrize(
    ("pred", "golds", "sr1_em", "sr1_subem", "flashrag_f1", "r1_em", "r1_f1", "r1_cem1", "r1_cem2", "rs_f1", "rag_em"),
    AUTHORS,
    ids=[c[0] for c in AUTHORS],
)
def test_metrics_score_as_the_authors_code(
    pred, golds, sr1_em, sr1_subem, flashrag_f1, r1_em, r1_f1, r1_cem1, r1_cem2, rs_f1, rag_em
):
    r1 = normalize_answer_r1
    assert exact_match(pred, golds) == sr1_em
    assert cover_em(pred, golds, boundary="char") == sr1_subem
    assert f1_score(pred, golds) == pytest.approx(flashrag_f1)
    assert exact_match(pred, golds, normalizer=r1) == r1_em
    assert f1_score(pred, golds, normalizer=r1) == pytest.approx(r1_f1)
    assert cover_em_tokens(pred, golds) == r1_cem1
    assert cover_em(pred, golds, boundary="char", normalizer=r1) == r1_cem2
    assert round(token_f1(pred, golds), 2) == pytest.approx(rs_f1)
    assert exact_match(pred, golds[:1], normalizer=normalize_answer_rag_r1) == rag_em
