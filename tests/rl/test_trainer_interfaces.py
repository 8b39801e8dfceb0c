"""What the RL trainer asks of its collaborators, through their interfaces: whether a generator runs on the policy's
own weights and what work it counted (``Generator``), and what an auxiliary-NLL hook reports (``AuxNLL``)."""

from __future__ import annotations

from searchrl.generation.base import SamplingParams
from searchrl.generation.fake import ByteTokenizer, ScriptedGenerator
from searchrl.generation.hf import HFGenerateGenerator, HFGenerator
from searchrl.rl.hooks import AuxNLL, as_aux_nll
from searchrl.testing import tiny_model


def test_generators_say_whether_they_run_on_a_model_and_count_their_work() -> None:
    tok, model, other = ByteTokenizer(), tiny_model(), tiny_model()
    hf = HFGenerator(model, tok)
    assert hf.runs_on(model) and not hf.runs_on(other)
    assert HFGenerateGenerator(model, tok).runs_on(model) and not HFGenerateGenerator(other, tok).runs_on(model)
    scripted = ScriptedGenerator(tok, lambda prompt: " done")
    assert not scripted.runs_on(model) and scripted.counters() == {}
    assert hf.counters() == {}
    hf.generate([tok.encode("Q: hi\nA:")], SamplingParams(max_new_tokens=3, temperature=0.0))
    counts = hf.counters()
    assert counts["prefill_tokens"] == len(tok.encode("Q: hi\nA:")) and counts["decode_row_steps"] > 0
    counts["prefill_tokens"] = -1  # a snapshot: changing it leaves the generator's own counts alone
    assert hf.counters()["prefill_tokens"] > 0


def test_a_plain_function_is_an_aux_hook_that_reports_nothing() -> None:
    seq = ([1, 2], [3], [1])
    hook = as_aux_nll(lambda step, trajs: [seq] * step)
    assert isinstance(hook, AuxNLL) and hook(2, []) == [seq, seq] and hook.metrics() == {}

    class Own(AuxNLL):
        def __call__(self, step, trajs):
            return []

    own = Own()
    assert as_aux_nll(own) is own and own.metrics() == {}
