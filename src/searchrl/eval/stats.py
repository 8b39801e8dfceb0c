"""How sure an evaluation's numbers are: a 95% interval for every score's mean, and paired comparisons of each
method with a reference method.

*Intervals.* Each summary row's score ``m`` gets ``m_ci95 = [lo, hi]``: the 2.5th and 97.5th percentiles of the
mean over ``resamples`` bootstrap resamples of the row's questions (a percentile bootstrap). A question whose score
is None (a judge reply that could not be read) is left out, as it is left out of the mean. No scored question: null;
all scored questions alike (one question, say): ``[mean, mean]``. An ``average`` row resamples each dataset on its
own and averages the datasets' means, as the row averages them.

*Paired comparisons.* Each method against a reference method (``evaluation.compare_to``), per dataset and score, on
the questions both answered (the same ``id``; a repeated id pairs its first occurrences, then its second, ...), and
over the datasets for the methods with an ``average`` row: the mean difference (method minus reference), its 95%
paired-bootstrap interval (the pairs resampled together) and the two-sided p-value of a paired sign-flip
permutation test (each pair's difference keeps or flips its sign at random; ``p`` is the share of sign patterns whose
mean difference is at least as far from 0 as the observed one: all patterns exactly when there are at most
``resamples`` (and 2**16) of them, else ``resamples`` random ones, counted as (hits + 1) / (resamples + 1)).
Identical answers give p = 1.

Every draw is seeded by ``seed`` (``evaluation.seed``) and the row's names, so a rerun, a resumed run and a
re-scoring of the saved predictions give the same numbers, whatever else was evaluated beside them.
"""

from __future__ import annotations

import json
import math
import zlib
from collections import Counter
from collections.abc import Sequence
from statistics import fmean
from typing import Any

import numpy as np

from searchrl.eval.report import AVERAGE, LABELS, md_cell

LEVEL = 0.95
RESAMPLES = 1000
#: the method ``compare_to: auto`` picks when it ran (the papers' standard RAG baseline), else the first method.
AUTO_REFERENCE = "naive_rag"
TEST = "paired sign-flip permutation test, two-sided"
_CELLS = 2_000_000  # resampled values drawn at once: bounds the memory of a large set
_EXACT_MAX = 16  # differences enumerated over every sign pattern at most (2**16 patterns): a huge resamples is drawn


def _rng(seed: int, *key: str) -> np.random.Generator:
    """A generator for one row's draws: the same for the same seed and names, whichever rows came before."""
    return np.random.default_rng([seed % 2**63, zlib.crc32(json.dumps(key).encode())])


def _scored(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def bootstrap_means(groups: Sequence[np.ndarray], resamples: int, rng: np.random.Generator) -> np.ndarray:
    """``resamples`` bootstrap replicates of the unweighted mean of the groups' means, each group resampled on its
    own (a single group: the plain bootstrap of its mean). Every group must be non-empty."""
    out = np.zeros(resamples)
    for g in groups:
        step = max(1, _CELLS // len(g))
        for start in range(0, resamples, step):
            stop = min(resamples, start + step)
            idx = rng.integers(0, len(g), size=(stop - start, len(g)), dtype=np.int32)
            out[start:stop] += np.take(g, idx).mean(axis=1)
    return out / len(groups)


def interval(
    groups: Sequence[np.ndarray], resamples: int, rng: np.random.Generator, point: float | None = None
) -> list[float] | None:
    """The percentile-bootstrap 95% interval of the mean of the groups' means (empty groups left out); None when
    every group is empty; ``[point, point]`` (``point`` default: that mean) when every group's values are alike."""
    groups = [np.asarray(g, dtype=float) for g in groups if len(g)]
    if not groups:
        return None
    if point is None:
        point = fmean(fmean(g.tolist()) for g in groups)
    if all(np.ptp(g) == 0 for g in groups):  # every resample has the same mean
        return [point, point]
    alpha = 100 * (1 - LEVEL) / 2
    lo, hi = np.percentile(bootstrap_means(groups, resamples, rng), [alpha, 100 - alpha])
    return [float(lo), float(hi)]


def sign_flip_p(groups: Sequence[np.ndarray], resamples: int, rng: np.random.Generator) -> float:
    """Two-sided p-value of the paired sign-flip permutation test of the mean of the groups' mean differences
    (``groups``: each dataset's per-question differences, non-empty). Exact over every sign pattern when there are
    at most ``resamples`` of them, else (hits + 1) / (resamples + 1) over ``resamples`` random patterns."""
    weighted = np.concatenate([np.asarray(g, dtype=float) / (len(g) * len(groups)) for g in groups])
    a = weighted[weighted != 0]  # a zero difference is the same whichever its sign
    if len(a) == 0:
        return 1.0
    observed = abs(a.sum())
    tol = 1e-9 * np.abs(a).sum()  # sums of the same terms in another order
    if len(a) <= min(_EXACT_MAX, math.log2(max(resamples, 1))):  # every sign pattern, exactly
        signs = ((np.arange(2 ** len(a))[:, None] >> np.arange(len(a))) & 1) * 2 - 1
        return float(np.mean(np.abs(signs @ a) >= observed - tol))
    hits, total = 0, a.sum()
    step = max(1, _CELLS // len(a))
    for start in range(0, resamples, step):
        random_bytes = rng.integers(0, 256, size=(min(step, resamples - start), -(-len(a) // 8)), dtype=np.uint8)
        kept = np.unpackbits(random_bytes, axis=1)[:, : len(a)].astype(float)  # 1: the sign kept, 0: flipped
        hits += int(np.sum(np.abs(2 * (kept @ a) - total) >= observed - tol))
    return (hits + 1) / (resamples + 1)


def _slots(items: Sequence[dict[str, Any]]) -> dict[tuple[str, str], dict[str, dict[str, Any]]]:
    """Each (dataset, method)'s scores by question: ``{id#k: metrics}``, ``k`` counting the id's repeats."""
    seen: Counter[tuple[str, str, str]] = Counter()
    out: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for it in items:
        key = (it["dataset"], it["method"], str(it.get("id")))
        out.setdefault(key[:2], {})[f"{key[2]}#{seen[key]}"] = it["metrics"]
        seen[key] += 1
    return out


def _values(scores: dict[str, dict[str, Any]], metric: str) -> np.ndarray:
    """The metric's values in question order (the ids sorted: the file's row order does not matter), scored only."""
    return np.array([v for _, s in sorted(scores.items()) if _scored(v := s.get(metric))], dtype=float)


def add_intervals(
    rows: list[dict[str, Any]], items: Sequence[dict[str, Any]], metrics: Sequence[str], seed: int, resamples: int
) -> None:
    """Put ``<metric>_ci95`` after each score of the summary rows (:mod:`searchrl.eval.report`'s), in place."""
    per = _slots(items)
    datasets = [d for d in dict.fromkeys(r["dataset"] for r in rows) if d != AVERAGE]
    for row in rows:
        method, dataset = row["method"], row["dataset"]
        over = datasets if dataset == AVERAGE else [dataset]
        updated: dict[str, Any] = {}
        for key, value in row.items():
            updated[key] = value
            if key in metrics:
                groups = [_values(per.get((d, method), {}), key) for d in over]
                rng = _rng(seed, "ci", dataset, method, key)
                updated[f"{key}_ci95"] = None if value is None else interval(groups, resamples, rng, value)
        row.clear()
        row.update(updated)


def _paired(groups: list[np.ndarray], resamples: int, seed: int, *key: str) -> dict[str, Any]:
    groups = [g for g in groups if len(g)]
    if not groups:
        return {"n": 0, "diff": None, "ci95": None, "p": None}
    diff = fmean(fmean(g.tolist()) for g in groups)
    return {
        "n": sum(len(g) for g in groups),
        "diff": diff,
        "ci95": interval(groups, resamples, _rng(seed, "diff", *key), diff),
        "p": sign_flip_p(groups, resamples, _rng(seed, "p", *key)),
    }


def compare(
    items: Sequence[dict[str, Any]], metrics: Sequence[str], reference: str, seed: int, resamples: int
) -> list[dict[str, Any]]:
    """One entry per (dataset, method other than ``reference``) that share questions, then ``average`` entries
    for the methods that share questions with the reference on every dataset (of two or more): ``dataset``,
    ``method``, ``reference``, ``n`` (shared questions) and per score ``{n, diff, ci95, p}`` (``n``: the pairs
    scored on both sides)."""
    per = _slots(items)
    datasets = list(dict.fromkeys(d for d, _ in per))
    methods = [m for m in dict.fromkeys(m for _, m in per) if m != reference]
    out: list[dict[str, Any]] = []
    diffs: dict[tuple[str, str, str], np.ndarray] = {}
    for dataset in datasets:
        ref = per.get((dataset, reference))
        for method in methods:
            mine = per.get((dataset, method))
            shared = sorted(set(mine or {}) & set(ref or {}))
            if not shared:
                continue
            entry: dict[str, Any] = {"dataset": dataset, "method": method, "reference": reference, "n": len(shared)}
            for m in metrics:
                pairs = [(mine[s].get(m), ref[s].get(m)) for s in shared]
                d = np.array([a - b for a, b in pairs if _scored(a) and _scored(b)], dtype=float)
                diffs[(dataset, method, m)] = d
                entry[m] = _paired([d], resamples, seed, dataset, method, reference, m)
            out.append(entry)
    if len(datasets) > 1:
        for method in methods:
            mine = [e for e in out if e["method"] == method]
            if len(mine) < len(datasets):
                continue
            entry = {"dataset": AVERAGE, "method": method, "reference": reference, "n": sum(e["n"] for e in mine)}
            for m in metrics:
                groups = [diffs[(d, method, m)] for d in datasets]
                entry[m] = _paired(groups, resamples, seed, AVERAGE, method, reference, m)
            out.append(entry)
    return out


def reference_method(methods: Sequence[str], compare_to: str | None) -> str | None:
    """The method the others are compared with: ``compare_to`` itself, ``auto`` = :data:`AUTO_REFERENCE` when it
    ran, else the first method (none when only one ran); None = no comparisons."""
    if compare_to is None or compare_to.lower() in ("none", "null"):
        return None
    if compare_to == "auto":
        if len(methods) < 2:
            return None
        return AUTO_REFERENCE if AUTO_REFERENCE in methods else methods[0]
    if compare_to not in methods:
        raise ValueError(
            f"compare_to {compare_to!r} is not one of the methods evaluated ({', '.join(methods) or 'none'}); name "
            "one of them, auto, or none for no comparisons"
        )
    return compare_to


def _pct(v: float) -> str:
    return f"{100 * v:.1f}"


def _signed(v: float) -> str:
    return f"{100 * v:+.1f}"


def _p(p: float) -> str:
    return "p<0.001" if p < 0.001 else f"p={p:.3f}"


def _table(title: str, intro: str, metrics: Sequence[str], rows: Sequence[dict[str, Any]], cell) -> str:
    """A markdown section: ``title``, ``intro``, then one line per (dataset, method) row with ``cell(row, metric)``
    for each metric."""
    lines = [
        f"## {title}",
        "",
        intro,
        "",
        "| dataset | method | n | " + " | ".join(md_cell(LABELS.get(m, m)) for m in metrics) + " |",
        "|---|---|---:|" + "---:|" * len(metrics),
    ]
    for r in rows:
        name = "Average" if r["dataset"] == AVERAGE else r["dataset"]
        cells = " | ".join(cell(r, m) for m in metrics)
        lines.append(f"| {md_cell(name)} | {md_cell(r['method'])} | {r['n']} | {cells} |")
    return "\n".join(lines)


def _interval_cell(r: dict[str, Any], m: str) -> str:
    mean, ci = r.get(m), r.get(f"{m}_ci95")
    within = "" if ci is None else f" [{_pct(ci[0])}, {_pct(ci[1])}]"
    return "-" if mean is None else _pct(mean) + within


def _comparison_cell(e: dict[str, Any], m: str) -> str:
    s = e[m]
    if s["diff"] is None:
        return "-"
    lo, hi = s["ci95"]
    return f"{_signed(s['diff'])} [{_signed(lo)}, {_signed(hi)}] {_p(s['p'])}"


def intervals_table(rows: Sequence[dict[str, Any]], metrics: Sequence[str], resamples: int, seed: int) -> str:
    """Markdown: each row's scores with their intervals, ``mean [lo, hi]`` in %."""
    intro = (
        f"Scores in %: the mean and its 95% percentile-bootstrap interval over the questions ({resamples} resamples, "
        f"seed {seed}). Two methods whose intervals overlap much may differ by chance; the paired comparisons below "
        "test that directly."
    )
    return _table("95% confidence intervals", intro, metrics, rows, _interval_cell)


def comparisons_table(
    entries: Sequence[dict[str, Any]], metrics: Sequence[str], reference: str, resamples: int
) -> str:
    """Markdown: each method minus the reference, ``diff [lo, hi] p=...`` in points."""
    intro = (
        f"Each method minus {md_cell(reference)} on the questions both answered, in points: the mean difference, its "
        f"95% paired-bootstrap interval and the two-sided p-value of a paired sign-flip permutation test ({resamples} "
        "resamples; exact over every sign pattern when there are fewer). `n`: the questions both answered."
    )
    return _table(f"Paired comparisons with {md_cell(reference)}", intro, metrics, entries, _comparison_cell)


def uncertainty(
    rows: list[dict[str, Any]],
    items: Sequence[dict[str, Any]],
    metrics: Sequence[str],
    *,
    seed: int = 0,
    resamples: int = RESAMPLES,
    reference: str | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """Add the intervals to the summary ``rows`` (in place) and compare the methods with ``reference`` (from
    :func:`reference_method`; None: no comparisons): returns the summary JSON's keys (``intervals``: how they were
    drawn; ``comparisons``: the reference, the test and the entries of :func:`compare`) and the markdown sections.
    ``resamples`` 0: neither."""
    if resamples < 0:
        raise ValueError(f"resamples must be >= 0 (got {resamples}); 0 leaves the intervals out")
    if resamples == 0:
        return {}, []
    add_intervals(rows, items, metrics, seed, resamples)
    how = {"level": LEVEL, "method": "percentile bootstrap over questions", "resamples": resamples, "seed": seed}
    info: dict[str, Any] = {"intervals": how}
    sections = [intervals_table(rows, metrics, resamples, seed)]
    if reference is not None:
        entries = compare(items, metrics, reference, seed, resamples)
        info["comparisons"] = {"reference": reference, "test": TEST, "level": LEVEL, "rows": entries}
        if entries:
            sections.append(comparisons_table(entries, metrics, reference, resamples))
    return info, sections
