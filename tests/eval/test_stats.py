"""How sure an evaluation's numbers are: the bootstrap intervals of the scores (against the exact bootstrap
distribution and the binomial standard error), the paired sign-flip test (against full enumeration), seeding, the
edge cases (unscored questions, one or no question, methods on different questions) and the summary files of a run,
a re-scoring and a config."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from searchrl import cli
from searchrl.config import ConfigError, load_config
from searchrl.eval.baselines import DirectMethod, NaiveRAGMethod
from searchrl.eval.harness import evaluate
from searchrl.eval.report import AVERAGE, aggregate
from searchrl.eval.stats import bootstrap_means, compare, interval, reference_method, sign_flip_p, uncertainty


def items_of(method: str, values: list[float | None], dataset: str = "d", ids: list[str] | None = None) -> list[dict]:
    ids = ids or [f"q{i:03d}" for i in range(len(values))]
    return [
        {"dataset": dataset, "method": method, "id": i, "metrics": {"em": v}} for i, v in zip(ids, values, strict=True)
    ]


def summarise(items: list[dict], **kw) -> tuple[list[dict], dict, list[str]]:
    rows = aggregate(items, ["em"])
    methods = list(dict.fromkeys(r["method"] for r in rows))
    info, sections = uncertainty(
        rows, items, ["em"], reference=reference_method(methods, kw.pop("compare_to", "auto")), **kw
    )
    return rows, info, sections


def test_the_bootstrap_distribution_of_a_small_case_is_the_exact_one() -> None:
    """Three questions scored 0, 0, 1: a resample's mean is k/3 with k ~ Binomial(3, 1/3), so the means 0, 1/3,
    2/3, 1 come 8, 12, 6 and 1 times in 27; 1 has more than 2.5% of the mass, so the 95% interval is [0, 1]."""
    means = bootstrap_means([np.array([0.0, 0.0, 1.0])], 40_000, np.random.default_rng(1))
    share = {k: np.mean(np.isclose(means, k / 3)) for k in range(4)}
    assert share == pytest.approx({0: 8 / 27, 1: 12 / 27, 2: 6 / 27, 3: 1 / 27}, abs=0.01)
    assert interval([np.array([0.0, 0.0, 1.0])], 4000, np.random.default_rng(1)) == [0.0, 1.0]


@pytest.mark.parametrize("n", [100, 400])
def test_the_interval_half_width_is_the_binomial_standard_error_times_196(n: int) -> None:
    values = np.array([1.0] * (3 * n // 10) + [0.0] * (n - 3 * n // 10))  # EM 0.3
    lo, hi = interval([values], 4000, np.random.default_rng(0))
    half = 1.96 * np.sqrt(0.3 * 0.7 / n)
    assert (hi - lo) / 2 == pytest.approx(half, rel=0.1)
    assert lo < 0.3 < hi and (0.3 - lo) == pytest.approx(hi - 0.3, rel=0.2)


def test_an_average_resamples_each_dataset_on_its_own() -> None:
    """The mean of two datasets' means varies as (var1 / n1 + var2 / n2) / 4, not as one pooled sample would."""
    a, b = np.array([0.0, 1.0] * 50), np.array([1.0] * 20 + [0.0] * 380)
    means = bootstrap_means([a, b], 20_000, np.random.default_rng(0))
    assert means.mean() == pytest.approx((0.5 + 0.05) / 2, abs=0.002)
    assert means.std() == pytest.approx(np.sqrt((0.25 / 100 + 0.0475 / 400) / 4), rel=0.05)


def test_the_intervals_contain_the_means_and_narrow_with_more_questions() -> None:
    rng = np.random.default_rng(7)
    widths = []
    for n in (30, 120, 480):
        values = (rng.random(n) < 0.4).astype(float).tolist()
        (row,), _, _ = summarise(items_of("m", values))
        lo, hi = row["em_ci95"]
        assert lo < row["em"] < hi and 0 <= lo and hi <= 1
        widths.append(hi - lo)
    assert widths[0] > 1.5 * widths[1] > 2.25 * widths[2]  # about halves when n quadruples


def test_the_intervals_sit_next_to_their_means_and_are_reproducible() -> None:
    items = items_of("m", [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0])
    (row,), info, _ = summarise(items, seed=3)
    assert list(row)[:5] == ["dataset", "method", "n", "em", "em_ci95"]
    assert info["intervals"] == {"level": 0.95, "method": "percentile bootstrap over questions", "resamples": 1000,
                                 "seed": 3}  # fmt: skip
    assert summarise(items, seed=3)[0][0]["em_ci95"] == row["em_ci95"]
    assert summarise(items[::-1], seed=3)[0][0]["em_ci95"] == row["em_ci95"]  # the file's row order does not matter
    assert summarise(items, seed=4)[0][0]["em_ci95"] != row["em_ci95"]
    # another method evaluated beside it draws from its own stream: this row's interval is unchanged
    rows, _, _ = summarise([*items_of("other", [0.0, 1.0, 1.0]), *items], seed=3)
    assert rows[1]["em_ci95"] == row["em_ci95"]


def test_unscored_questions_are_left_out_and_one_or_none_give_a_point_or_null() -> None:
    with_none = items_of("m", [1.0, None, 0.0, 1.0, None, 0.0, 0.0])
    scored = [it for it in with_none if it["metrics"]["em"] is not None]
    (a,), _, _ = summarise(with_none)
    (b,), _, _ = summarise(scored)
    assert a["em"] == b["em"] == 0.4 and a["em_ci95"] == b["em_ci95"]
    (one,), _, _ = summarise(items_of("m", [None, 1.0, None]))
    assert one["em_ci95"] == [1.0, 1.0]
    (none,), _, _ = summarise(items_of("m", [None, None]))
    assert none["em"] is None and none["em_ci95"] is None
    (alike,), _, _ = summarise(items_of("m", [2 / 3] * 5))  # every resample's mean is the mean
    assert alike["em_ci95"] == [alike["em"], alike["em"]]


def all_patterns_p(diffs: list[float]) -> float:
    """The sign-flip p-value over every sign pattern, by brute force."""
    observed = abs(np.mean(diffs))
    stats = [abs(np.mean(np.multiply(s, diffs))) for s in itertools.product((-1, 1), repeat=len(diffs))]
    return float(np.mean(np.array(stats) >= observed - 1e-12))


def test_the_sign_flip_p_value_by_hand_and_against_every_pattern() -> None:
    rng = np.random.default_rng(0)
    assert sign_flip_p([np.array([1.0, 1.0, 1.0])], 1000, rng) == 2 / 8  # only all + and all - reach 3
    assert sign_flip_p([np.array([1.0, 1.0, -1.0, 0.0])], 1000, rng) == 1.0  # every pattern reaches |1|
    assert sign_flip_p([np.zeros(50)], 1000, rng) == 1.0
    diffs = [1.0, 0.5, 1.0, -0.25, 1.0, 0.75, 1.0, -1.0, 0.5, 1.0, 0.25, 1.0]  # 4096 patterns: more than 1000
    exact = all_patterns_p(diffs)
    assert sign_flip_p([np.array(diffs)], 1000, rng) == pytest.approx(exact, abs=0.03)
    assert sign_flip_p([np.array(diffs)], 4096, rng) == pytest.approx(exact, abs=1e-12)  # enumerated
    assert sign_flip_p([np.array(diffs[:9])], 1000, rng) == pytest.approx(all_patterns_p(diffs[:9]), abs=1e-12)


def test_an_identical_pair_has_p_1_and_a_large_consistent_difference_a_small_p() -> None:
    rng = np.random.default_rng(3)
    ref = (rng.random(200) < 0.3).astype(float).tolist()
    better = [1.0 if i % 3 == 0 else v for i, v in enumerate(ref)]  # right on a further ~third of the questions
    items = [*items_of("naive_rag", ref), *items_of("same", ref), *items_of("better", better)]
    rows, info, _ = summarise(items)
    cmp = {e["method"]: e for e in info["comparisons"]["rows"]}
    assert info["comparisons"]["reference"] == "naive_rag" and set(cmp) == {"same", "better"}
    assert cmp["same"]["em"] == {"n": 200, "diff": 0.0, "ci95": [0.0, 0.0], "p": 1.0}
    gap = np.mean(better) - np.mean(ref)
    assert cmp["better"]["em"]["diff"] == pytest.approx(gap) and cmp["better"]["em"]["p"] == 1 / 1001
    lo, hi = cmp["better"]["em"]["ci95"]
    assert 0 < lo < gap < hi


def test_methods_on_different_questions_are_paired_on_the_shared_ones() -> None:
    ref = items_of("naive_rag", [1.0, 0.0, 0.0, 1.0, 0.0], ids=["a", "b", "c", "d", "e"])
    other = items_of("agent", [1.0, 1.0, None, 1.0, 0.0], ids=["x", "b", "c", "d", "y"])
    (entry,) = compare([*ref, *other], ["em"], "naive_rag", 0, 1000)
    # shared: b, c, d; c has no agent score, so the pairs are b (1 - 0) and d (1 - 1)
    assert entry["n"] == 3 and entry["em"]["n"] == 2 and entry["em"]["diff"] == 0.5
    assert entry["em"]["ci95"] == [0.0, 1.0] and entry["em"]["p"] == 1.0  # one nonzero difference: 2 of 2 patterns
    assert compare([*ref, *items_of("agent", [1.0], ids=["z"])], ["em"], "naive_rag", 0, 1000) == []


def test_repeated_ids_pair_in_order_and_the_average_needs_every_dataset() -> None:
    ref = items_of("naive_rag", [0.0, 0.0], ids=["q", "q"])
    mine = items_of("agent", [1.0, 0.0], ids=["q", "q"])
    (entry,) = compare([*ref, *mine], ["em"], "naive_rag", 0, 1000)
    assert entry["n"] == 2 and entry["em"]["diff"] == 0.5
    two = [*ref, *mine, *items_of("naive_rag", [0.0], "d2"), *items_of("agent", [1.0], "d2")]
    two += items_of("cot", [1.0, 1.0], ids=["q", "q"])  # cot ran on d only: no average entry
    entries = {(e["dataset"], e["method"]): e for e in compare(two, ["em"], "naive_rag", 0, 1000)}
    assert set(entries) == {("d", "agent"), ("d2", "agent"), ("d", "cot"), (AVERAGE, "agent")}
    assert entries[(AVERAGE, "agent")]["em"]["diff"] == pytest.approx((0.5 + 1.0) / 2)
    assert entries[(AVERAGE, "agent")]["n"] == 3


def test_the_reference_method() -> None:
    assert reference_method(["direct", "naive_rag", "agent"], "auto") == "naive_rag"
    assert reference_method(["direct", "agent"], "auto") == "direct"
    assert reference_method(["agent"], "auto") is None
    assert reference_method(["direct", "agent"], None) is None and reference_method(["a", "b"], "none") is None
    assert reference_method(["direct", "agent"], "agent") == "agent"
    with pytest.raises(ValueError, match="compare_to 'cot' is not one of the methods evaluated"):
        reference_method(["direct", "agent"], "cot")


def test_no_resamples_leave_intervals_and_comparisons_out() -> None:
    rows, info, sections = summarise([*items_of("a", [1.0, 0.0]), *items_of("b", [0.0, 0.0])], resamples=0)
    assert info == {} and sections == [] and "em_ci95" not in rows[0]


def _methods(fakes) -> dict:
    def rag_reply(ctx: str) -> str:
        return "Rome" if "Anna Berg was born in Rome" in ctx else "no"

    rag = NaiveRAGMethod(fakes.scripted(rag_reply), fakes.KeywordRetriever(), topk=2)
    return {"direct": DirectMethod(fakes.scripted(fakes.direct_reply)), "naive_rag": rag}


def test_the_summary_files_hold_the_intervals_and_a_rescoring_recomputes_them(tmp_path, examples, fakes) -> None:
    result = evaluate(
        {"toy": examples * 3}, _methods(fakes), tmp_path / "run", metrics=["em", "f1"], show=False, seed=5
    )
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert all(r["em_ci95"] and r["f1_ci95"] for r in summary["rows"]) and summary["intervals"]["seed"] == 5
    assert summary["comparisons"]["reference"] == "naive_rag"
    assert [e["method"] for e in summary["comparisons"]["rows"]] == ["direct"]
    assert [r["em_ci95"] for r in summary["rows"]] == [r["em_ci95"] for r in result.rows]
    md = (tmp_path / "run" / "summary.md").read_text()
    assert "## 95% confidence intervals" in md and "## Paired comparisons with naive_rag" in md
    header = next(ln for ln in md.splitlines() if ln.startswith("| method"))
    assert "[" not in header and "\n| direct | 33.3 | 55.6 |" in md  # the main table keeps its cells
    csv_header = (tmp_path / "run" / "summary.csv").read_text().splitlines()[0].split(",")
    assert csv_header[3:6] == ["em", "em_ci95_lo", "em_ci95_hi"]

    preds = sorted(str(p) for p in (tmp_path / "run" / "predictions").glob("*.jsonl"))
    again_out = ["--out", str(tmp_path / "again"), "--seed", "5", "--metrics", "em,f1"]
    res = CliRunner().invoke(cli.app, ["eval", "rescore", *preds, *again_out])
    assert res.exit_code == 0, res.output
    assert "Paired comparisons with naive_rag" in res.output
    again = json.loads((tmp_path / "again" / "summary.json").read_text())
    ours = {(r["dataset"], r["method"]): r["em_ci95"] for r in summary["rows"]}
    assert {(r["dataset"], r["method"]): r["em_ci95"] for r in again["rows"]} == ours
    assert again["comparisons"] == summary["comparisons"]
    res = CliRunner().invoke(cli.app, ["eval", "rescore", *preds, "--compare-to", "direct", "--resamples", "200"])
    assert res.exit_code == 0 and "Paired comparisons with direct" in res.output
    res = CliRunner().invoke(cli.app, ["eval", "rescore", *preds, "--compare-to", "cot"])
    assert res.exit_code != 0 and "compare_to 'cot' is not one of the methods evaluated" in str(res.exception)


def test_a_reference_that_is_not_evaluated_fails_before_any_answer(tmp_path, examples, fakes) -> None:
    methods = _methods(fakes)
    with pytest.raises(ValueError, match="compare_to 'agent'"):
        evaluate({"toy": examples}, methods, tmp_path, metrics=["em"], show=False, compare_to="agent")
    assert not (tmp_path / "predictions").exists()


def test_the_config_names_the_reference_among_the_methods() -> None:
    cfg = load_config("multihop_cpu", ["evaluation.compare_to=agent"])
    assert cfg.evaluation.compare_to == "agent" and cfg.evaluation.bootstrap_resamples == 1000
    assert load_config("multihop_cpu", ["evaluation.compare_to=null"]).evaluation.compare_to is None
    assert load_config("multihop_cpu", ["evaluation.compare_to=none"]).evaluation.compare_to is None  # as the CLI
    with pytest.raises(ConfigError, match="compare_to 'direct' is not one of evaluation.methods"):
        load_config("multihop_cpu", ["evaluation.compare_to=direct"])
