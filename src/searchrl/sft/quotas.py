"""Quotas on selected training data: at most N items per source dataset and per difficulty bucket.

R1-Searcher's Table 1 draws fixed counts per source and bucket (stage 1: 200 HotpotQA + 150 2Wiki medium
questions); R1-Searcher++'s cold start keeps 720 HotpotQA + 85 2Wiki samples. A quota is written
``SOURCE/BUCKET=N``, ``SOURCE=N`` (any bucket) or ``*/BUCKET=N`` (any source). The source of a question is its
``source`` (or ``dataset``, or ``data_source``) field, lower-cased; a row without one has source ``all``. With quotas
given, an item that matches none is dropped; items are drawn in a random order fixed by the seed (the papers do not
say how their subsets were drawn) and come back in input order.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

T = TypeVar("T")
SOURCE_FIELDS = ("source", "dataset", "data_source")
ANY = "*"


def source_of(metadata: Mapping[str, Any]) -> str:
    """The source dataset named in a question's metadata (``all`` when there is none)."""
    for key in SOURCE_FIELDS:
        value = metadata.get(key)
        if value:
            return str(value).strip().lower()
    return "all"


def parse_quotas(items: Sequence[str] | Mapping[str, int] | None) -> dict[tuple[str, str], int]:
    """``["hotpotqa/medium=200", "2wikimultihopqa=85"]`` (or a mapping) -> {(source, bucket): N}."""
    pairs = list(items.items()) if isinstance(items, Mapping) else [_split(i) for i in items or []]
    out: dict[tuple[str, str], int] = {}
    for key, value in pairs:
        source, _, bucket = str(key).strip().lower().partition("/")
        try:
            n = int(value)
        except (TypeError, ValueError):
            n = -1
        if not source or n < 0:
            raise ValueError(f"bad quota {key}={value}; write SOURCE/BUCKET=N, SOURCE=N or */BUCKET=N with N >= 0")
        out[(source, bucket or ANY)] = n
    return out


def _split(item: str) -> tuple[str, str]:
    key, sep, value = str(item).partition("=")
    if not sep:
        raise ValueError(f"bad quota {item!r}; write SOURCE/BUCKET=N, SOURCE=N or */BUCKET=N (e.g. hotpotqa=720)")
    return key, value


def match(quotas: Mapping[tuple[str, str], int], source: str, bucket: str) -> tuple[str, str] | None:
    """The most specific quota that covers (source, bucket), or None."""
    for key in ((source, bucket), (source, ANY), (ANY, bucket), (ANY, ANY)):
        if key in quotas:
            return key
    return None


def apply_quotas(
    items: Sequence[T],
    quotas: Mapping[tuple[str, str], int],
    *,
    source: Callable[[T], str],
    bucket: Callable[[T], str] = lambda _: ANY,
    group: Callable[[T], str] | None = None,
    max_per_group: int | None = None,
    seed: int = 0,
) -> tuple[list[T], dict[str, int]]:
    """The items kept under the quotas (input order) and how many each quota got (``"source/bucket": n``).

    ``group`` / ``max_per_group``: at most that many items of one question. Without quotas only the cap applies."""
    if max_per_group is not None and max_per_group < 1:
        raise ValueError(f"the per-question cap must be >= 1 (or null for none), got {max_per_group}")
    order = list(range(len(items)))
    random.Random(seed).shuffle(order)
    used: Counter[tuple[str, str]] = Counter()
    per_group: Counter[str] = Counter()
    chosen: set[int] = set()
    for i in order:
        item = items[i]
        key = match(quotas, source(item), bucket(item)) if quotas else (ANY, ANY)
        if key is None or (quotas and used[key] >= quotas[key]):
            continue
        g = group(item) if group is not None else None
        if g is not None and max_per_group is not None and per_group[g] >= max_per_group:
            continue
        chosen.add(i)
        used[key] += 1
        if g is not None:
            per_group[g] += 1
    counts = {f"{s}/{b}": used[(s, b)] for s, b in quotas} if quotas else {}
    return [items[i] for i in sorted(chosen)], counts


def check_quotas(
    quotas: Mapping[tuple[str, str], int], sources: Iterable[str], buckets: Sequence[str] | None = None
) -> None:
    """Fail (before any sampling) on a quota that can fill nothing: one naming a bucket the stage does not keep
    (``buckets``; ``None``: the stage has no buckets, so only ``SOURCE=N`` applies) or a source none of the
    questions (``sources``, one per question) has."""
    present = set(sources)
    for source, bucket in quotas:
        name = f"{source}/{bucket}" if bucket != ANY else source
        if bucket != ANY and buckets is None:
            raise ValueError(f"quota {name}: this stage has no difficulty buckets; write {source}=N")
        if bucket != ANY and buckets is not None and bucket not in buckets:
            kept = ", ".join(buckets)
            raise ValueError(f"quota {name}: no kept question is in bucket {bucket!r}; use one of {kept}")
        if source != ANY and source not in present:
            have = f"sources: {', '.join(sorted(present))}" if present - {"all"} else "no row has a source field"
            raise ValueError(
                f"quota {name}: no question has source {source!r} ({have}); give each row a source field naming "
                "its dataset, or name a source the rows have"
            )


def shortfall(quotas: Mapping[tuple[str, str], int], counts: Mapping[str, int]) -> str:
    """``"hotpotqa/medium 12 of 200"`` for every quota that was not filled ('' when all were)."""
    return ", ".join(
        f"{s}/{b} {counts.get(f'{s}/{b}', 0)} of {n}" for (s, b), n in quotas.items() if counts.get(f"{s}/{b}", 0) < n
    )
