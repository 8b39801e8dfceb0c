"""Prompts through chat templates that differ from ChatML the way other model families' do: one refuses a system
message (Gemma-2), one takes only alternating user / assistant turns (Mistral and Mixtral v0.1), one drops a system
message without a word (Phi-3-mini), one moves the system text into the latest user turn (Mistral Nemo / v0.3), one
opens every reply with ``<think>\\n`` (DeepSeek-R1-Distill). The templates are written here to behave like those
families'; the tokenizer is the bundled SmolLM2's, with each family's turn markers added as special tokens."""

from __future__ import annotations

import copy

import pytest
from tokenizers import AddedToken

from searchrl.data.records import QAExample
from searchrl.generation.fake import ScriptedGenerator
from searchrl.generation.prompts import render_prompt
from searchrl.pipeline import load_tokenizer
from searchrl.protocols import get_protocol
from searchrl.retrieval.base import Hit
from searchrl.rl.memorization import rewriter_prompt
from searchrl.rollout.engine import RolloutEngine, RolloutLimits, build_prompt_text

_TURNS = (
    "{% for m in loop_messages %}{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{{ '<start_of_turn>' + ('model' if m['role'] == 'assistant' else m['role']) + '\\n' + m['content'] | trim"
    " + '<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
)
#: refuses a system message, as Gemma-2's template does
NO_SYSTEM = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
    "{% endif %}{% set loop_messages = messages %}" + _TURNS
)
#: user and assistant turns only, alternating, as Mistral-7B-Instruct-v0.1's and Mixtral's templates
ALTERNATING = (
    "{{ bos_token }}{% set loop_messages = messages %}{% for m in messages %}"
    "{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if m['role'] == 'user' %}{{ '[INST] ' + m['content'] + ' [/INST]' }}{% else %}{{ m['content'] + eos_token }}"
    "{% endif %}{% endfor %}"
)
#: renders user and assistant messages only, as Phi-3-mini's first template
DROPS_SYSTEM = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}{{ '<|user|>\\n' + m['content'] + "
    "'<|end|>\\n<|assistant|>\\n' }}{% elif m['role'] == 'assistant' %}{{ m['content'] + '<|end|>\\n' }}{% endif %}"
    "{% endfor %}"
)
#: the system text goes into the latest user message, as Mistral Nemo's and v0.3's templates
SYSTEM_TO_LAST_USER = (
    "{% if messages[0]['role'] == 'system' %}{% set system = messages[0]['content'] %}"
    "{% set loop_messages = messages[1:] %}{% else %}{% set loop_messages = messages %}{% endif %}{{ bos_token }}"
    "{% for m in loop_messages %}{% if m['role'] == 'user' %}{% if loop.last and system is defined %}"
    "{{ '[INST]' + system + '\\n\\n' + m['content'] + '[/INST]' }}{% else %}{{ '[INST]' + m['content'] + '[/INST]' }}"
    "{% endif %}{% else %}{{ m['content'] + eos_token }}{% endif %}{% endfor %}"
)
#: the generation prompt opens the reply with "<think>\n"; reasoning before </think> is not kept in history, as
#: DeepSeek-R1-Distill's template
THINK_OPENING = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'system' %}{{ m['content'] }}"
    "{% elif m['role'] == 'user' %}{{ '<|User|>' + m['content'] }}{% else %}"
    "{{ '<|Assistant|>' + m['content'].split('</think>')[-1] + eos_token }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|Assistant|><think>\\n' }}{% endif %}"
)
FAMILIES = {
    "no_system": (NO_SYSTEM, ["<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"], "<bos>", "<eos>"),
    "alternating": (ALTERNATING, ["<s>", "</s>"], "<s>", "</s>"),
    "drops_system": (DROPS_SYSTEM, ["<s>", "<|user|>", "<|assistant|>", "<|end|>"], "<s>", "<|endoftext|>"),
    "system_to_last_user": (SYSTEM_TO_LAST_USER, ["<s>", "</s>", "[INST]", "[/INST]"], "<s>", "</s>"),
    "think_opening": (THINK_OPENING, ["<|bos|>", "<|eos|>", "<|User|>", "<|Assistant|>"], "<|bos|>", "<|eos|>"),
}
QUESTION = "Who wrote the novel Dune?"


@pytest.fixture(scope="module")
def smollm():
    return load_tokenizer("smollm2-135m-instruct")  # the bundled model's tokenizer (cached after the first use)


def family(smollm, name: str):
    template, specials, bos, eos = FAMILIES[name]
    tok = copy.deepcopy(smollm)
    tok.add_tokens([AddedToken(s, special=True, normalized=False) for s in specials], special_tokens=True)
    tok.bos_token, tok.eos_token, tok.chat_template = bos, eos, template
    return tok


@pytest.mark.parametrize("name", ["no_system", "alternating", "drops_system"])
@pytest.mark.parametrize("protocol", ["r1_searcher", "r1_searcher_pp", "r_search"])
def test_a_system_prompt_goes_into_the_user_turn_of_a_template_without_one(smollm, name, protocol) -> None:
    tok = family(smollm, name)
    p = get_protocol(protocol)
    prompt = build_prompt_text(p, tok, QUESTION)
    system = p.system_prompt()
    assert system and f"{system.strip()}\n\n{p.instruction(QUESTION).strip()}" in prompt
    assert prompt.count(system.strip()) == 1
    # a template that takes a system message keeps it as one (SmolLM2's ChatML)
    assert build_prompt_text(p, smollm, QUESTION).startswith(f"<|im_start|>system\n{system}<|im_end|>")


@pytest.mark.parametrize("name", ["no_system", "alternating", "drops_system"])
def test_the_rewriter_prompt_keeps_its_documents_without_a_system_role(smollm, name) -> None:
    prompt = rewriter_prompt(family(smollm, name), QUESTION, ["Dune is a novel by Frank Herbert."])
    assert "Dune is a novel by Frank Herbert." in prompt and "Who wrote the novel Dune?" in prompt


def test_a_template_that_cannot_render_the_prompt_is_a_one_line_error(smollm) -> None:
    tok = copy.deepcopy(smollm)
    tok.chat_template = "{{ raise_exception('Only tool messages are supported!') }}"
    with pytest.raises(ValueError, match="model.prompt_style: raw") as err:
        render_prompt(tok, [{"role": "user", "content": QUESTION}])
    assert "\n" not in str(err.value) and "Only tool messages" in str(err.value)


class Retriever:
    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        return [[Hit(f"{q}-{i}", f"Title {i}", f"Text {i} about {q}.", 1.0) for i in range(k)] for q in queries]


TURNS = [
    'I need the author.</think>\n<tool_call>\n{"name": "search", "arguments": {"queries": ["Dune author"]}}\n'
    "</tool_call>",
    "<answer>Frank Herbert</answer>",
]


@pytest.mark.parametrize(
    ("name", "close"),
    [
        ("no_system", "\n</tool_response><end_of_turn>\n<start_of_turn>model\n"),
        ("alternating", "\n</tool_response> [/INST]"),
        ("system_to_last_user", "\n</tool_response>[/INST]"),
        ("think_opening", "\n</tool_response><|Assistant|><think>\n"),
    ],
)
def test_tool_call_frames_replies_in_other_families_templates(smollm, name, close) -> None:
    tok = family(smollm, name)
    p = get_protocol("tool_call")

    replies = iter(TURNS)  # one question: one call a turn

    def script(context: str) -> str:
        return next(replies)

    limits = RolloutLimits(max_turns=3, max_searches=2, max_new_tokens=200, max_obs_tokens=1000, topk=2)
    engine = RolloutEngine(ScriptedGenerator(tok, script), Retriever(), p, limits)
    (traj,) = engine.run([QAExample("q1", QUESTION, ["Frank Herbert"])])
    assert p.frame.kind == "hermes" and p.frame.close == close
    assert [t.action for t in traj.turns] == ["search", "answer"] and traj.answer == "Frank Herbert"
    assert traj.turns[0].observation.endswith(close)
    prompt = tok.decode(traj.prompt_ids, skip_special_tokens=False)
    assert prompt.count(p.hermes_system()) == 1  # the Hermes system text (the tool's schema) reached the prompt
    report = p.check_format(traj.response_text(tok))
    assert report.ok and report.n_searches == 1, report.problems


#: what a model under THINK_OPENING writes: its reply starts inside the think block the generation prompt opened
THINKING = {
    "search_r1": [
        "I need the author.</think>\n<search> Dune author </search>",
        "<think>Herbert.</think>\n<answer> Frank Herbert </answer>",
    ],
    "rag_r1": [
        "I need the author.</think>\n<search> Dune author </search>",
        "<think>Herbert.</think>\n<answer> Frank Herbert </answer>",
    ],
    "reason": ["It is Herbert.</think>\n<answer> Frank Herbert </answer>"],
    "rag": ["The documents say Herbert.</think>\n<answer> Frank Herbert </answer>"],
    "r1_searcher": [
        "I need the author. <|begin_of_query|> Dune author<|end_of_query|>",
        "It is Herbert.</think>\n\n<answer> Frank Herbert </answer>",
    ],
}


def roll(tok, p, replies: list[str]):
    turns = iter(replies)
    limits = RolloutLimits(max_turns=3, max_searches=2, max_new_tokens=200, max_obs_tokens=1000, topk=2)
    engine = RolloutEngine(ScriptedGenerator(tok, lambda context: next(turns)), Retriever(), p, limits)
    (traj,) = engine.run([QAExample("q1", QUESTION, ["Frank Herbert"])])
    return traj


@pytest.mark.parametrize("protocol", sorted(THINKING))
def test_a_think_block_the_generation_prompt_opens_is_the_responses_opening(smollm, protocol) -> None:
    tok, p = family(smollm, "think_opening"), get_protocol(protocol)
    traj = roll(tok, p, THINKING[protocol])
    prompt = tok.decode(traj.prompt_ids, skip_special_tokens=False)
    assert prompt.endswith("<|Assistant|><think>\n")  # R1-Searcher's own <think> is not pre-filled a second time
    assert p.template_opening == p.response_opening == "<think>\n" and p.prefill == ""
    response = traj.response_text(tok)
    assert response.startswith(THINKING[protocol][0])  # the opening is prompt, never sampled nor trained
    assert traj.action_mask[: len(tok.encode(THINKING[protocol][0]))] == [1] * len(tok.encode(THINKING[protocol][0]))
    report = p.check_format(response)
    assert report.ok, report.problems
    assert p.extract_answer(response) == traj.answer == "Frank Herbert"
    assert p.check_format("<think>" + response).problems  # a second <think> the model writes itself is nested


@pytest.mark.parametrize("protocol", sorted(THINKING))
def test_a_template_without_an_opening_keeps_each_protocols_prompt_and_check(smollm, protocol) -> None:
    p = get_protocol(protocol)
    p.bind_tokenizer(family(smollm, "think_opening"))
    p.bind_tokenizer(smollm)  # bound again to SmolLM2's ChatML: nothing of the other template's opening is left
    assert p.template_opening == "" and p.prefill == p.response_prefix
    prefill = "<think>" if protocol == "r1_searcher" else ""
    assert build_prompt_text(p, smollm, QUESTION).endswith("<|im_start|>assistant\n" + prefill)
    if protocol == "r1_searcher":  # its own pre-filled <think> opens the response, as before
        assert p.response_opening == "<think>"
    else:  # nothing opens it: a reply that starts inside a think block is text outside any tag
        assert p.response_opening == ""
        assert "text outside any tag in state start" in p.check_format(THINKING[protocol][0]).problems


def test_oracle_and_text_sft_data_do_not_repeat_the_opened_think(smollm) -> None:
    from searchrl.sft.oracle import oracle_trajectories
    from searchrl.sft.text_data import text_trajectory

    tok, p = family(smollm, "think_opening"), get_protocol("search_r1")
    ex = QAExample("q1", QUESTION, ["Frank Herbert"])
    (traj,) = oracle_trajectories(p, [ex], Retriever(), tok, topk=2, unchained="question")
    assert tok.decode(traj.prompt_ids, skip_special_tokens=False).endswith("<think>\n")
    assert not traj.turns[0].text.startswith("<think>") and traj.turns[0].text.startswith("I will search")
    assert p.check_format(traj.response_text(tok)).ok
    row = {
        "question": QUESTION,
        "answers": ["Frank Herbert"],
        "response": "<think> It is Herbert. </think>\n<answer> Frank Herbert </answer>",
    }
    text = text_trajectory(row, get_protocol("reason"), tok)
    assert text.turns[0].text.startswith("It is Herbert.") and not text.metadata["format_problems"]


@pytest.mark.parametrize("protocol", ["reason", "rag"])
def test_the_no_search_baselines_oracle_closes_the_think_block_the_template_opened(smollm, protocol) -> None:
    from searchrl.sft.oracle import oracle_trajectories

    tok, p = family(smollm, "think_opening"), get_protocol(protocol)
    ex = QAExample("q1", QUESTION, ["Frank Herbert"])
    (traj,) = oracle_trajectories(p, [ex], Retriever(), tok, topk=2, unchained="question")
    response = traj.response_text(tok)
    assert not response.startswith("<think>") and p.check_format(response).ok, p.check_format(response).problems
    assert p.extract_answer(response) == "Frank Herbert"
    (plain,) = oracle_trajectories(p, [ex], Retriever(), smollm, topk=2, unchained="question")
    assert plain.turns[0].text.startswith("<answer>")  # without an opening, the short answer alone as before


#: the token each template writes right after an assistant message's content, where its EOS is another token
ENDS = {"no_system": "<end_of_turn>", "drops_system": "<|end|>", "qwen_base": "<|im_end|>"}
CHAIN = [
    {"sub_question": "Who wrote Dune?", "answer": "Frank Herbert", "query": "Dune author"},
    {"sub_question": "Where was Frank Herbert born?", "answer": "Tacoma", "query": "Frank Herbert birthplace"},
]


def ending(smollm, name: str):
    if name != "qwen_base":
        return family(smollm, name)
    tok = copy.deepcopy(smollm)  # ChatML, EOS <|endoftext|>: a Qwen base model's tokenizer
    tok.eos_token = "<|endoftext|>"
    return tok


def sft_endings(tok, style: str) -> list[int]:
    """The last token of every kind of SFT target: oracle, text data, the rewriter's data, the memorizer's NLL."""
    from searchrl.config import MemorizationConfig
    from searchrl.rl.memorization import Memorizer
    from searchrl.sft.oracle import oracle_trajectories
    from searchrl.sft.rewriter import rewriter_sft_examples
    from searchrl.sft.text_data import text_trajectory

    ex = QAExample("q1", "Where was the author of Dune born?", ["Tacoma"], {"chain": CHAIN})
    (oracle,) = oracle_trajectories(get_protocol("search_r1"), [ex], Retriever(), tok, topk=2, prompt_style=style)
    row = {"question": QUESTION, "answers": ["Frank Herbert"], "response": "<answer> Frank Herbert </answer>"}
    text = text_trajectory(row, get_protocol("reason"), tok, style)
    pp = get_protocol("r1_searcher_pp")
    (pp_oracle,) = oracle_trajectories(pp, [ex], Retriever(), tok, topk=2, prompt_style=style)
    (rewriter,) = rewriter_sft_examples([pp_oracle], pp, tok, style)
    _, nll, _ = Memorizer(MemorizationConfig(), None, pp, tok, style).target([1], "\\boxed{Tacoma}")
    return [oracle.response_ids[-1], text.response_ids[-1], rewriter.response_ids[-1], nll[-1]]


@pytest.mark.parametrize("name", sorted(ENDS))
def test_sft_targets_end_as_the_chat_template_ends_a_reply(smollm, name) -> None:
    tok = ending(smollm, name)
    end = tok.convert_tokens_to_ids(ENDS[name])
    assert end != tok.eos_token_id
    assert sft_endings(tok, "auto") == [end] * 4
    assert sft_endings(tok, "raw") == [tok.eos_token_id] * 4  # raw prompts: no template, the tokenizer's EOS


@pytest.mark.parametrize("name", sorted(ENDS))
def test_generation_stops_at_the_templates_end_of_a_reply(smollm, name) -> None:
    from types import SimpleNamespace

    from searchrl.generation.hf import _eos_ids
    from searchrl.generation.vllm import VLLMGenerator

    tok = ending(smollm, name)
    end = tok.convert_tokens_to_ids(ENDS[name])
    model = SimpleNamespace(generation_config=SimpleNamespace(eos_token_id=tok.eos_token_id))  # a base model's
    assert _eos_ids(model, tok) == {tok.eos_token_id, end}
    vllm = VLLMGenerator.__new__(VLLMGenerator)  # no engine: its stops only
    vllm.tokenizer = tok
    assert vllm.stop_ids == [end]


def test_the_bundled_models_sft_targets_still_end_with_its_eos(smollm) -> None:
    """SmolLM2's EOS is the token its template ends a reply with (<|im_end|>): its SFT data is what it was."""
    eos = smollm.convert_tokens_to_ids("<|im_end|>")
    assert smollm.eos_token_id == eos
    assert sft_endings(smollm, "auto") == sft_endings(smollm, "raw") == [eos] * 4
