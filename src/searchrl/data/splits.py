"""Deterministic, content-addressed train / held-out splits of a QA file.

A question is held out by a rule that needs no seed and no row order: rows are ordered by the SHA-256 of their id and
the first ``n_heldout`` are held out. The same file always gives the same split, adding rows to a file moves no
existing question from held-out to train unless it is displaced by one with a smaller hash, and the rule works on any
dataset (it is how the bundled training pipeline splits a user's QA file: train on the rest, report on the held-out).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from searchrl.data.records import QAExample


def id_hash(example_id: str) -> str:
    return hashlib.sha256(str(example_id).encode("utf-8")).hexdigest()


def heldout_split(examples: Sequence[QAExample], n_heldout: int) -> tuple[list[QAExample], list[QAExample]]:
    """``(train, heldout)``: the ``n_heldout`` examples with the smallest id hashes are held out; both keep the
    file's order. Ids must be unique (a duplicated id would put one question on both sides)."""
    ids = [e.id for e in examples]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise ValueError(f"duplicate question id {dup!r}: a held-out split needs unique ids (fix the QA file)")
    if not 0 <= n_heldout <= len(examples):
        raise ValueError(
            f"cannot hold out {n_heldout} of {len(examples)} questions; hold out fewer: searchrl data split "
            "--heldout N, or searchrl run ... pipeline.STAGE.args.heldout=N for a split stage"
        )
    held = set(sorted(ids, key=id_hash)[:n_heldout])
    return [e for e in examples if e.id not in held], [e for e in examples if e.id in held]
