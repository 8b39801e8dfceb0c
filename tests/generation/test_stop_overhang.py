"""A stop string completed inside a token (Qwen's BPE writes ``</answer>.`` as ``</``, ``answer``, ``>.``): every
backend returns the sampled token, and a completion's text is those ids decoded, the characters after the stop
string included, as the HF decode loop returns it. vLLM cuts its own text at the end of the stop string, so its text
alone would disagree with the ids (a turn's text, ``Trajectory.policy_text``, against its tokens)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import httpx
import pytest

from searchrl.data.records import QAExample
from searchrl.generation.base import Completion, Generator, SamplingParams
from searchrl.generation.openai_compat import OpenAICompatGenerator
from searchrl.generation.sampling import finish_row
from searchrl.generation.vllm import VLLMGenerator
from searchrl.protocols import get_protocol
from searchrl.retrieval.base import Hit
from searchrl.rollout.engine import RolloutEngine, RolloutLimits

pytestmark = pytest.mark.shared

SEARCH = "<think> need the city </think>\n<search> capital of France </search>\n\n"
ANSWER = "<think> found it </think>\n<answer> Paris </answer>."


@pytest.fixture(scope="module")
def qwen(shared_data: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(shared_data / "tokenizers" / "qwen3")


def served(tok, reply: str, stops: tuple[str, ...]) -> tuple[list[int], str, str | None]:
    """What a vLLM engine returns for ``reply`` sampled as its canonical tokens: the ids up to the token that
    completes the first stop string, and its text cut at the end of that stop string (vLLM's rule)."""
    ids = tok.encode(reply, add_special_tokens=False)
    c = finish_row(tok, ids, [0.0] * len(ids), set(), stops, 0.0)
    if c.stop_string is None:
        return c.token_ids, c.text, None
    text = tok.decode(c.token_ids, skip_special_tokens=True)
    return c.token_ids, text[: text.index(c.stop_string) + len(c.stop_string)], c.stop_string


def test_the_qwen_tokens_overhang_the_stop_strings(qwen) -> None:
    for reply, stop, tail in ((SEARCH, "</search>", "\n\n"), (ANSWER, "</answer>", ".")):
        ids, text, fired = served(qwen, reply, (stop,))
        assert fired == stop and text.endswith(stop)
        assert qwen.decode(ids) == text + tail  # the last sampled token carries characters past the stop string


def fake_vllm(monkeypatch, tok, replies: list[str]) -> None:
    """A stand-in ``vllm`` package whose engine answers each prompt with the next reply, as vLLM's outputs."""
    vllm = types.ModuleType("vllm")
    inputs = types.ModuleType("vllm.inputs")
    vllm.SamplingParams = lambda **kw: kw
    inputs.TokensPrompt = lambda prompt_token_ids: prompt_token_ids
    queue = iter(replies)

    class LLM:
        def generate(self, prompts, sps, use_tqdm=False):
            outs = []
            for sp in sps:
                ids, text, fired = served(tok, next(queue), tuple(sp["stop"]))
                out = types.SimpleNamespace(
                    token_ids=ids,
                    text=text,
                    logprobs=[{i: types.SimpleNamespace(logprob=-0.5)} for i in ids],
                    stop_reason=fired,
                    finish_reason="stop",
                )
                outs.append(types.SimpleNamespace(outputs=[out]))
            return outs

    vllm.LLM = LLM
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.inputs", inputs)


def vllm_generator(tok) -> VLLMGenerator:
    gen = VLLMGenerator.__new__(VLLMGenerator)  # the engine itself is the stand-in's
    gen.tokenizer, gen.model_path = tok, "stand-in"
    gen.llm = sys.modules["vllm"].LLM()
    return gen


def test_vllm_completion_text_is_its_ids_decoded(qwen, monkeypatch) -> None:
    fake_vllm(monkeypatch, qwen, [SEARCH, ANSWER])
    search, answer = vllm_generator(qwen).generate([[1], [2]], SamplingParams(stop=("</search>", "</answer>")))
    assert (search.stop_string, answer.stop_string) == ("</search>", "</answer>")
    for c in (search, answer):
        assert c.text == qwen.decode(c.token_ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
    assert answer.text.endswith("</answer>.") and search.text.endswith("</search>\n\n")


def test_a_vllm_servers_completion_text_is_its_ids_decoded(qwen) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        ids, text, fired = served(qwen, ANSWER, ("</answer>",))
        logprobs = {"tokens": [f"token_id:{i}" for i in ids], "token_logprobs": [-0.5] * len(ids)}
        choice = {"text": text, "finish_reason": "stop", "stop_reason": fired, "logprobs": logprobs}
        return httpx.Response(200, json={"choices": [choice]})

    gen = OpenAICompatGenerator("http://vllm.test/v1", "policy", qwen, timeout_s=5.0)
    gen.client = httpx.Client(transport=httpx.MockTransport(handler), timeout=5.0)
    (c,) = gen.generate([[1, 2]], SamplingParams(stop=("</answer>",)))
    assert c.timings["exact_tokens"] == 1.0 and c.stop_string == "</answer>"
    assert c.text == qwen.decode(c.token_ids, skip_special_tokens=True) and c.text.endswith("</answer>.")


class CanonicalModel(Generator):
    """A model that samples each reply as its canonical tokens, stopped by the HF backends' rule."""

    def __init__(self, tok) -> None:
        self.tokenizer = tok

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        out = []
        for p in prompts:
            reply = ANSWER if "Title 0" in self.tokenizer.decode(p) else SEARCH
            ids = self.tokenizer.encode(reply, add_special_tokens=False)[: params.max_new_tokens]
            out.append(finish_row(self.tokenizer, ids, [-0.5] * len(ids), set(), tuple(params.stop), 0.0))
        return out


class Retriever:
    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        return [[Hit(f"d{i}", f"Title {i}", f"Paris is the capital of France ({i}).", 1.0) for i in range(k)]] * len(
            queries
        )


@pytest.mark.parametrize("backend", ["hf", "vllm"])
def test_a_turns_text_is_exactly_its_sampled_tokens_on_every_backend(qwen, monkeypatch, backend: str) -> None:
    """Search-R1 with the Qwen tokenizer: the policy's text per turn, the inserted documents and the tokens agree,
    whichever backend sampled them."""
    if backend == "vllm":
        fake_vllm(monkeypatch, qwen, [SEARCH, ANSWER])
        gen: Generator = vllm_generator(qwen)
    else:
        gen = CanonicalModel(qwen)
    limits = RolloutLimits(max_turns=3, max_searches=2, max_new_tokens=64, topk=2)
    engine = RolloutEngine(gen, Retriever(), get_protocol("search_r1"), limits)
    (t,) = engine.run([QAExample("q1", "What is the capital of France?", ["Paris"])], seed=0)
    assert [turn.action for turn in t.turns] == ["search", "answer"] and t.answer == "Paris"
    sampled = [i for i, m in zip(t.response_ids, t.action_mask, strict=True) if m]
    inserted = [i for i, m in zip(t.response_ids, t.action_mask, strict=True) if not m]
    assert t.policy_text == qwen.decode(sampled, skip_special_tokens=True) == SEARCH + ANSWER
    assert qwen.decode(inserted) == t.turns[0].observation
    assert [turn.n_gen_tokens for turn in t.turns] == [len(qwen.encode(SEARCH)), len(qwen.encode(ANSWER))]
