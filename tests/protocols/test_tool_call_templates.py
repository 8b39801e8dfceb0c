"""The tool_call protocol on real chat templates: a rollout's prompt and response ids are the template's own rendering
of the conversation (the model's turns as assistant messages, the replies as tool messages), token for token.

SmolLM2-135M-Instruct (the bundled model; its template ignores tools: the Hermes fallback) and Qwen3 (tools rendered
by the template; ../shared/data/tokenizers/qwen3, tests marked ``shared``)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from searchrl.data.loaders import load_qa
from searchrl.data.records import QAExample
from searchrl.data.synth import generate_world, write_world
from searchrl.generation.fake import ScriptedGenerator
from searchrl.pipeline import load_tokenizer
from searchrl.protocols import ToolCallProtocol, get_protocol, search_tool
from searchrl.protocols.chat_frame import hermes_reply
from searchrl.retrieval import build_index, load_index
from searchrl.retrieval.base import Hit
from searchrl.rollout.engine import RolloutEngine, RolloutLimits, build_prompt_text
from searchrl.rollout.trajectory import Trajectory
from searchrl.sft.oracle import oracle_trajectories

QUESTION = "Curious is a women's fragrance by a singer born in what city?"
# Qwen3 writes its reasoning in <think> blocks; the template re-renders them as written (modulo the model's text,
# the rendering of a conversation is what the engine built). SmolLM2's template renders any text verbatim.
TURNS = [
    "<think>\nI need the singer first.\n</think>\n\n"
    + '<tool_call>\n{"name": "search", "arguments": {"queries": ["Curious fragrance singer"]}}\n</tool_call>',
    "<think>\nBritney Spears. Now her birthplace, and the fragrance's year.\n</think>\n\n"
    + '<tool_call>\n{"name": "search", "arguments": {"queries": ["Britney Spears born", "Curious 2004"]}}\n'
    + "</tool_call>",
    "<think>\nShe was born in McComb.\n</think>\n\n<answer>McComb, Mississippi</answer>",
]


@pytest.fixture(scope="module")
def smollm():
    return load_tokenizer("smollm2-135m-instruct")  # the bundled model's tokenizer (cached after the first use)


@pytest.fixture(scope="module")
def qwen3(shared_data: Path):
    from transformers import AutoTokenizer

    path = shared_data / "tokenizers" / "qwen3"
    if not path.is_dir():
        pytest.skip(f"no Qwen3 tokenizer at {path}")
    return AutoTokenizer.from_pretrained(path)


def inserted_texts(tok, traj: Trajectory) -> list[str]:
    """Each run of inserted tokens, decoded as it is (a truncated reply without its middle)."""
    runs, ids = [], []
    for i, m in [*zip(traj.response_ids, traj.action_mask, strict=True), (None, 1)]:
        if not m:
            ids.append(i)
        elif ids:
            runs.append(tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False))
            ids = []
    return runs


def conversation(tok, p: ToolCallProtocol, traj: Trajectory) -> list[dict[str, str]]:
    """The chat a trajectory is: the prompt's messages, each turn an assistant message, each reply a tool message
    (a user message ``<tool_response>...</tool_response>`` under the Hermes fallback)."""
    messages = p.chat_messages(traj.question)
    replies = iter(inserted_texts(tok, traj))
    for turn in traj.turns:
        messages.append({"role": "assistant", "content": turn.text})
        if turn.observation:
            reply = p.observation_documents(next(replies))
            tool = p.frame.kind == "tools"
            messages.append(
                {"role": "tool", "content": reply} if tool else {"role": "user", "content": hermes_reply(reply)}
            )
    return messages


def assert_template_rendering(tok, p: ToolCallProtocol, traj: Trajectory, last_turn: bool = True) -> None:
    """prompt + response ids == the template's rendering of the conversation up to the end of the last turn
    (``last_turn=False``: up to the start of the last turn, the end of the last reply)."""
    tools = {"tools": p.chat_tools()} if p.chat_tools() else {}
    full = tok.apply_chat_template(conversation(tok, p, traj), tokenize=False, **tools)
    ids = traj.prompt_ids + traj.response_ids
    if last_turn:
        last = traj.turns[-1].text
        expected = full[: full.rindex(last) + len(last)]
    else:
        ids = ids[: len(ids) - traj.turns[-1].n_gen_tokens]
        expected = tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        assert full.startswith(expected)
    assert tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False) == expected
    assert ids == tok.encode(expected, add_special_tokens=False)


class Retriever:
    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        return [[Hit(f"{q}-{i}", f"Title {i}", f"Text {i} about {q}.", 1.0) for i in range(k)] for q in queries]


def rollout(tok, turns: list[str] = TURNS) -> tuple[ToolCallProtocol, Trajectory]:
    p = get_protocol("tool_call")
    assert isinstance(p, ToolCallProtocol)

    def script(context: str) -> str:
        return turns[min(context.count("</tool_response>\n"), len(turns) - 1)]  # one per reply so far

    limits = RolloutLimits(max_turns=4, max_searches=3, max_new_tokens=200, max_obs_tokens=1000, topk=2)
    engine = RolloutEngine(ScriptedGenerator(tok, script), Retriever(), p, limits)
    (traj,) = engine.run([QAExample("q1", QUESTION, ["McComb"])])
    return p, traj


def check_rollout(tok, kind: str) -> None:
    p, traj = rollout(tok)
    assert p.frame.kind == kind
    assert [t.action for t in traj.turns] == ["search", "search", "answer"] and traj.answer == "McComb, Mississippi"
    assert_template_rendering(tok, p, traj)
    # masks: exactly the model's turns are sampled; every reply (the template's text around it too) is inserted
    sampled = [i for i, m in zip(traj.response_ids, traj.action_mask, strict=True) if m]
    inserted = [i for i, m in zip(traj.response_ids, traj.action_mask, strict=True) if not m]
    assert tok.decode(sampled) == "".join(TURNS)
    assert tok.decode(inserted) == "".join(t.observation for t in traj.turns)
    assert traj.turns[0].observation.startswith("<|im_end|>\n<|im_start|>user\n<tool_response>\n")
    assert traj.turns[0].observation.endswith("\n</tool_response><|im_end|>\n<|im_start|>assistant\n")
    report = p.check_format(traj.response_text(tok))
    assert report.ok and report.n_searches == 2 and report.extra["queries_per_call"] == [1, 2], report.problems


def test_smollm2_hermes_fallback_renders_exactly(smollm) -> None:
    check_rollout(smollm, "hermes")
    p = get_protocol("tool_call")
    p.bind_tokenizer(smollm)  # as the engine does
    prompt = build_prompt_text(p, smollm, QUESTION)
    assert p.chat_tools() is None and prompt.startswith("<|im_start|>system\nYou can call functions")
    schema = prompt.split("<tools>\n")[1].split("\n</tools>")[0]
    assert json.loads(schema) == search_tool(3)
    assert "SmolLM" not in prompt  # our system prompt replaces the template's default one


@pytest.mark.shared
def test_qwen3_tools_render_exactly(qwen3) -> None:
    check_rollout(qwen3, "tools")
    p = get_protocol("tool_call")
    p.bind_tokenizer(qwen3)
    prompt = build_prompt_text(p, qwen3, QUESTION)
    assert p.chat_tools() == [search_tool(3)] and p.system_prompt() is None
    assert prompt.startswith("<|im_start|>system\n# Tools\n") and json.dumps(search_tool(3)) in prompt
    assert prompt.endswith("<|im_start|>assistant\n")


def test_invalid_calls_and_budget_notices_are_template_replies_too(smollm) -> None:
    turns = ["<tool_call>\n{oops}\n</tool_call>", *TURNS]
    p, traj = rollout(smollm, turns)
    assert [t.action for t in traj.turns] == ["invalid", "search", "search", "answer"]
    assert_template_rendering(smollm, p, traj)
    report = p.check_format(traj.response_text(smollm))
    assert not report.ok and report.extra["n_notices"] == 1 and report.answer == "McComb, Mississippi"


def test_frames_fall_back_when_a_template_cannot_render_tool_replies(smollm) -> None:
    """A template that uses tools but refuses a tool message without a structured call gets the Hermes fallback;
    one that does not render messages verbatim is a clear error."""
    strict = copy.deepcopy(smollm)
    strict.chat_template = (
        "{% if tools %}{{ 'TOOLS ' + tools | tojson + '\\n' }}{% endif %}"
        "{% for m in messages %}{% if m['role'] == 'tool' %}{{ raise_exception('tool without a call') }}{% endif %}"
        "{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    )
    p = get_protocol("tool_call")
    p.bind_tokenizer(strict)
    assert p.frame.kind == "hermes" and p.chat_tools() is None
    shouting = copy.deepcopy(smollm)
    shouting.chat_template = "{% for m in messages %}{{ m['content'] | upper }}\n{% endfor %}"
    with pytest.raises(ValueError, match="prompt_style: raw"):
        get_protocol("tool_call").bind_tokenizer(shouting)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    d = tmp_path_factory.mktemp("world")
    write_world(generate_world(200, seed=3), d)
    return load_qa(d / "train.jsonl", limit=12), load_index(build_index(d / "corpus.jsonl", "bm25", d / "bm25"))


def check_oracle(tok, world, last_turn: bool) -> None:
    """Cold-start data in the tool_call format: JSON calls the parser accepts, well-formed, the template's text
    (up to the answer turn only for Qwen3, whose template adds an empty <think> block to a last turn without one)."""
    examples, retriever = world
    p = get_protocol("tool_call")
    assert isinstance(p, ToolCallProtocol)
    # no truncation: a reply cut in its middle joins two token runs that the text would not tokenize to
    trajs = oracle_trajectories(p, examples, retriever, tok, topk=2, plan="decompose_facts")
    assert {len(t.turns[0].queries) for t in trajs} == {1, 2}  # comparisons: both hops in one call
    for ex, t in zip(examples, trajs, strict=True):
        for turn in t.turns[:-1]:
            assert p.parse(turn.text).queries == tuple(turn.queries)  # type: ignore[union-attr]
        report = p.check_format(t.response_text(tok))
        assert report.ok and report.answer == ex.answers[0] and report.n_searches == t.n_searches, report.problems
        t.turns[-1].text += tok.eos_token  # the oracle ends with EOS (the end of the assistant's message)
        assert_template_rendering(tok, p, t, last_turn)


def test_oracle_trajectories_are_tool_calls_smollm2(smollm, world) -> None:
    check_oracle(smollm, world, last_turn=True)


@pytest.mark.shared
def test_oracle_trajectories_are_tool_calls_qwen3(qwen3, world) -> None:
    check_oracle(qwen3, world, last_turn=False)
