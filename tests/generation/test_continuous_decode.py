"""``HFGenerator.decode_continuous``: rows that enter, leave and re-enter a running batch decode exactly as they would
alone, and a re-entering row prefills only its new tokens."""

from __future__ import annotations

import pytest
import torch

from searchrl.generation.base import Completion, SamplingParams, Segment
from searchrl.generation.continuous import SlotCache
from searchrl.generation.fake import ByteTokenizer
from searchrl.generation.hf import HFGenerator
from searchrl.testing import tiny_model


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


class Staggered:
    """Row ``i`` enters at the scheduler's ``2 * i + 1``-th call (or at once when nothing else decodes); each
    finished segment comes back ``extra`` tokens longer (an "observation") until the row has run ``turns`` segments.
    Records every segment and completion."""

    def __init__(self, prompts: list[list[int]], turns: int, budgets: list[int]) -> None:
        self.prompts, self.turns, self.budgets = prompts, turns, budgets
        self.calls = 0
        self.done_turns = [0] * len(prompts)
        self.segments: dict[tuple[int, int], Segment] = {}
        self.completions: dict[tuple[int, int], Completion] = {}
        self.pending: list[Segment] = []
        self.entered: set[int] = set()

    def _segment(self, key: int, context: list[int]) -> Segment:
        turn = self.done_turns[key]
        seg = Segment(key, context, self.budgets[(key + turn) % len(self.budgets)], seed=1000 * key + turn)
        self.segments[key, turn] = seg
        return seg

    def finished(self, key: int, completion: Completion) -> bool:
        turn = self.done_turns[key]
        self.completions[key, turn] = completion
        self.done_turns[key] += 1
        if self.done_turns[key] == self.turns:
            return False
        extra = [40 + (key * 7 + turn * 3 + j) % 50 for j in range(3 + key % 4)]
        self.pending.append(self._segment(key, self.segments[key, turn].context + completion.token_ids + extra))
        return True

    def ready(self, wait: bool) -> list[Segment] | None:
        n = len(self.prompts)
        self.calls += 1
        due = [i for i in range(n) if i not in self.entered and 2 * i < self.calls]
        if wait and not due and not self.pending:  # nothing to decode: the next row enters now
            due = [i for i in range(n) if i not in self.entered][:1]
        for i in due:
            self.entered.add(i)
            self.pending.append(self._segment(i, self.prompts[i]))
        out, self.pending = self.pending, []
        return None if not out and len(self.entered) == n else out


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_rows_decode_as_they_would_alone(temperature: float) -> None:
    tok = ByteTokenizer()
    model = tiny_model().double()
    prompts = [tok.encode(f"Q{i}: {'abc' * i} what?\nA:") for i in range(6)]
    stops = ("x", "!")
    gen = HFGenerator(model, tok, max_batch_size=4)
    sched = Staggered(prompts, turns=3, budgets=[5, 12, 9])
    gen.decode_continuous(sched, SamplingParams(temperature=temperature, stop=stops))
    assert len(sched.completions) == 6 * 3
    assert gen.stats["reused_tokens"] > 0
    assert gen.stats["decode_row_steps"] > gen.stats["decode_steps"]  # rows shared steps
    alone = HFGenerator(model, tok)
    for (key, turn), seg in sched.segments.items():
        params = SamplingParams(seg.max_new_tokens, temperature, stop=stops, row_seeds=(seg.seed,))
        (ref,) = alone.generate([seg.context], params)
        got = sched.completions[key, turn]
        assert got.token_ids == ref.token_ids, (key, turn)
        assert (got.finish_reason, got.text) == (ref.finish_reason, ref.text)
        assert max((abs(a - b) for a, b in zip(got.logprobs, ref.logprobs, strict=True)), default=0) < 1e-6
        alone.reset()


def test_row_seeds_make_a_rows_tokens_independent_of_its_batch() -> None:
    tok = ByteTokenizer()
    model = tiny_model().double()
    prompts = [tok.encode(f"prompt {i}") for i in range(5)]
    gen = HFGenerator(model, tok)
    params = SamplingParams(16, 1.0, row_seeds=tuple(range(5)))
    together = gen.generate(prompts, params)
    for i in (0, 3):
        (alone,) = gen.generate([prompts[i]], SamplingParams(16, 1.0, row_seeds=(i,)))
        assert alone.token_ids == together[i].token_ids
    with pytest.raises(ValueError, match="row_seeds has 2 seeds for 5 prompts"):
        gen.generate(prompts, SamplingParams(16, 1.0, row_seeds=(1, 2)))


def test_slot_cache_keeps_rows_through_compaction_and_growth() -> None:
    cache = SlotCache(n_layers=2, n_kv=2, head_dim=4, dtype=torch.float32, device=torch.device("cpu"), max_rows=8)
    rows = [[(torch.randn(2, n, 4), torch.randn(2, n, 4)) for _ in range(2)] for n in (3, 7, 1, 5, 2)]
    cache.add(rows[:3], room=[2, 2, 2])
    cache.add(rows[3:], room=[90, 1])  # longer rows: the buffers grow
    order = cache.compact([1, 3, 4])
    assert sorted(order) == [1, 3, 4] and cache.lens == [rows[o][0][0].shape[1] for o in order]
    for b, o in enumerate(order):
        for (k, v), (k0, v0) in zip(cache.row(b, cache.lens[b]), rows[o], strict=True):
            assert torch.equal(k, k0) and torch.equal(v, v0)
