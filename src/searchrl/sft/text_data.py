"""SFT data written as text: a prompt and a whole response (reasoning, search calls, the documents that came back,
the answer) in a protocol's tags, made into trajectories as the rollout engine would have recorded them.

A JSONL row is one of:

* ``{"question", "response"}`` (``id`` and ``golden_answers`` / ``answer`` optional): the prompt is the protocol's
  for that question, built as a rollout builds it (chat template or raw text, ``model.prompt_style``);
* ``{"prompt", "completion"}`` (TRL's layouts): the prompt as given, a string or a list of chat messages (rendered
  through the chat template with its generation prompt); the completion a string or one assistant message;
* ``{"messages": [..., {"role": "assistant", "content": ...}]}``: the last message is the response, the ones
  before it the prompt;
* LLaMA-Factory's layouts, read as its converters read them: alpaca ``{"instruction", "input", "output"}`` (optional
  ``system`` and ``history`` of ``[prompt, response]`` pairs; the user turn is instruction and input joined by a
  newline) and sharegpt ``{"conversations": [{"from": "human" | "gpt" | "system", "value"}, ...]}``. As in the
  messages layout, only the last reply is the response; earlier replies are prompt (LLaMA-Factory trains on them too
  unless ``mask_history`` is set).

A file is JSON lines or, named ``.json``, one JSON array of rows (LLaMA-Factory's datasets).

The response is cut at every inserted observation: a result block (Search-R1's ``<information>...</information>``)
right after a search call's closing tag, whitespace aside, the rule the protocols' format checkers use. The text
between observations is the policy's (loss mask 1); each observation, with the whitespace around it, is context
(mask 0), tokenized on its own as the engine tokenizes inserted text. An end-of-sequence token closes the response.
A result block anywhere else is the model's own text and is trained on, as it would be in a rollout.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from searchrl.data.loaders import iter_rows, row_to_example
from searchrl.generation.prompts import render_prompt, reply_end_ids
from searchrl.protocols import Answer, Invalid, Protocol, Search, TagProtocol
from searchrl.protocols.chat_frame import ChatFrame
from searchrl.rollout.engine import build_prompt_text
from searchrl.rollout.trajectory import Trajectory, Turn
from searchrl.utils import console, read_jsonl

#: the fields that make a row text SFT data (a row with ``prompt_ids`` / ``action_mask`` holds tokens already)
TEXT_FIELDS = ("response", "completion", "messages", "conversations")
_LAYOUTS = (
    '{"question", "response"}, {"prompt", "completion"}, {"messages": [..., assistant message]}, or LLaMA-Factory\'s '
    'alpaca {"instruction", "input", "output"} or sharegpt {"conversations"}'
)
_SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system"}


def _is_alpaca(row: dict[str, Any]) -> bool:
    return "instruction" in row and "output" in row  # KILT's questions have input and output, no instruction


def is_text_row(row: dict[str, Any]) -> bool:
    """Whether a JSONL row is text SFT data rather than a trajectory or an SFT example of token ids."""
    return not {"prompt_ids", "response_ids", "action_mask"} & set(row) and (
        any(f in row for f in TEXT_FIELDS) or _is_alpaca(row)
    )


def text_layout(row: dict[str, Any]) -> str:
    """The layout of a text row: its response field's name, or ``alpaca`` / ``sharegpt``."""
    if _is_alpaca(row):
        return "alpaca"
    return next(("sharegpt" if f == "conversations" else f for f in TEXT_FIELDS if f in row), "-")


def sft_rows(path: str | Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(where, row)`` of an SFT data file: JSON lines, or a ``.json`` file holding one array of rows."""
    if Path(path).suffix == ".json":
        return iter_rows(path)
    return ((f"{path}:{i}", row) for i, row in read_jsonl(path))


def observation_spans(protocol: TagProtocol, response: str) -> list[tuple[int, int, str]]:
    """``(start, end, text)`` of each inserted observation in ``response``: from the end of the search call's closing
    tag to the end of the result block and the whitespace the protocol's observations end with; ``text`` is what the
    engine inserts there (for ``tool_call``, the reply in the chat template's frame, its special tokens restored
    when the response shows them decoded). Raises ``ValueError`` on a result block that a search call opens but
    nothing closes."""
    s_close = protocol.search_tags[1]
    frame = getattr(protocol, "frame", None)
    if isinstance(frame, ChatFrame):  # tool_call: the reply sits in the text the chat template puts around it
        forms, tail = [(frame.open, frame.close), (frame.open_decoded, frame.close_decoded)], 0
    else:
        template = protocol.render_observation(["query"], [[]])
        forms, tail = [protocol.result_tags], len(template) - len(template.rstrip())  # Search-R1: a blank line
    spans: list[tuple[int, int, str]] = []
    pos = 0
    while found := [(at, o, c) for o, c in forms if o and (at := response.find(o, pos)) >= 0]:
        at, r_open, r_close = min(found)
        before = response[pos:at].rstrip()
        if not before.endswith(s_close):
            pos = at + len(r_open)
            continue
        close = response.find(r_close, at + len(r_open))
        if close < 0:
            raise ValueError(
                f"a result block opened with {r_open!r} after a search call is never closed ({r_close!r})"
            )
        start, end = pos + len(before), close + len(r_close)
        end += len(response[end : end + tail]) - len(response[end : end + tail].lstrip())
        text = response[start:end]
        if isinstance(frame, ChatFrame):
            text = response[start:at] + frame.wrap(response[at + len(r_open) : close])
        spans.append((start, end, text))
        pos = end
    return spans


def _message_text(value: Any, where: str, field: str) -> str:
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], dict):  # [{"role": "assistant", ...}]
        value = value[0]
    if isinstance(value, dict):
        if value.get("role", "assistant") != "assistant":
            raise ValueError(f"{where}: field '{field}' must be the assistant's reply, got role {value.get('role')!r}")
        value = value.get("content")
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: field '{field}' must be a non-empty string (the whole response)")
    return value


def _messages(value: Any, where: str, field: str) -> list[dict[str, str]]:
    if not isinstance(value, list) or not all(isinstance(m, dict) and "role" in m and "content" in m for m in value):
        raise ValueError(f"{where}: field '{field}' must be a list of chat messages ({{'role', 'content'}})")
    return value


def _llama_factory_messages(row: dict[str, Any], where: str) -> list[dict[str, str]] | None:
    """An alpaca or sharegpt row as chat messages, by LLaMA-Factory's converters' rules; None for other layouts."""
    system = row.get("system")
    messages = [{"role": "system", "content": system}] if isinstance(system, str) and system else []
    if "conversations" in row:
        turns = row["conversations"]
        if not isinstance(turns, list) or not all(isinstance(t, dict) and {"from", "value"} <= set(t) for t in turns):
            raise ValueError(f"{where}: field 'conversations' must be a list of sharegpt turns ({{'from', 'value'}})")
        for turn in turns:
            if turn["from"] not in _SHAREGPT_ROLES:
                raise ValueError(
                    f"{where}: a sharegpt turn from {turn['from']!r} is not read (human, gpt or system); write the "
                    "search results into the reply, in the protocol's result tags"
                )
            messages.append({"role": _SHAREGPT_ROLES[turn["from"]], "content": turn["value"]})
        return messages
    if not _is_alpaca(row):
        return None
    history = row.get("history") or []
    if not isinstance(history, list) or not all(isinstance(h, list | tuple) and len(h) == 2 for h in history):
        raise ValueError(f"{where}: field 'history' must be a list of [prompt, response] pairs")
    for old_prompt, old_response in history:
        messages += [{"role": "user", "content": old_prompt}, {"role": "assistant", "content": old_response}]
    user = "\n".join(str(row[f]) for f in ("instruction", "input") if row.get(f))
    return [*messages, {"role": "user", "content": user}, {"role": "assistant", "content": row["output"]}]


def _prompt_and_response(
    row: dict[str, Any], protocol: Protocol, tokenizer, style: str, where: str, default_id: str
) -> tuple[str, str, str, str, list[str]]:
    """``(id, question, prompt text, response text, golds)`` of one row."""
    if not is_text_row(row):
        raise ValueError(f"{where}: not a text SFT row ({_LAYOUTS}); found fields {sorted(row)}")
    row_id = str(row.get("id") or row.get("_id") or default_id)
    converted = _llama_factory_messages(row, where)
    if "messages" in row or converted is not None:
        messages = converted if converted is not None else _messages(row["messages"], where, "messages")
        field = {"alpaca": "output", "sharegpt": "conversations"}.get(text_layout(row), "messages")
        if len(messages) < 2 or messages[-1]["role"] != "assistant":
            raise ValueError(f"{where}: '{field}' must end with the assistant's reply, after the prompt's messages")
        user = [m["content"] for m in messages[:-1] if m["role"] == "user"]
        prompt = render_prompt(tokenizer, messages[:-1], style)
        return row_id, (user[-1] if user else ""), prompt, _message_text(messages[-1], where, field), []
    response_field = "response" if "response" in row else "completion"
    response = _message_text(row[response_field], where, response_field)
    if "prompt" in row and "question" not in row:
        given = row["prompt"]
        if isinstance(given, str):
            return row_id, given, given, response, []
        messages = _messages(given, where, "prompt")
        user = [m["content"] for m in messages if m["role"] == "user"]
        return row_id, (user[-1] if user else ""), render_prompt(tokenizer, messages, style), response, []
    rest = {k: v for k, v in row.items() if k not in TEXT_FIELDS}
    try:
        ex = row_to_example(rest, where, default_id, need_answers=False)
    except ValueError as err:
        raise ValueError(f"{err} (text SFT rows: {_LAYOUTS})") from None
    return ex.id, ex.question, build_prompt_text(protocol, tokenizer, ex.question, style), response, list(ex.answers)


def text_trajectory(
    row: dict[str, Any], protocol: Protocol, tokenizer, style: str = "auto", where: str = "row", default_id: str = ""
) -> Trajectory:
    """One text row (see the module docstring) as a trajectory: prompt tokens, then the response's policy text
    (mask 1) and inserted observations (mask 0), each tokenized apart, with one turn per policy segment."""
    _bind(protocol, tokenizer, style)
    return _trajectory(row, protocol, tokenizer, style, where, default_id)


def _bind(protocol: Protocol, tokenizer, style: str) -> None:
    """Refuse a protocol without tags; bind the tokenizer (tool_call works out its reply frame from the template)."""
    if not isinstance(protocol, TagProtocol):
        raise ValueError(
            f"text SFT data needs a protocol with search and result tags (a TagProtocol); '{protocol.name}' has "
            "none: give trajectories recorded by `searchrl data rejection-sample` or `searchrl data oracle` instead"
        )
    protocol.bind_tokenizer(tokenizer, style)


def _trajectory(
    row: dict[str, Any], protocol: TagProtocol, tokenizer, style: str, where: str, default_id: str
) -> Trajectory:
    row_id, question, prompt, response, golds = _prompt_and_response(
        row, protocol, tokenizer, style, where, default_id or where
    )
    # the prompt opens the response (R1-Searcher's pre-filled <think>, a chat template's own "<think>\n"): that
    # opening is prompt, never a target, and a response that writes it is read after it
    stripped = protocol.strip_opening(response)
    if stripped != response:
        response, prefill = stripped, protocol.prefill
        prompt += "" if prompt.endswith(prefill) else prefill
    try:
        spans = observation_spans(protocol, response)
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None
    traj = Trajectory(
        uid=f"text/{row_id}",
        group_id=f"text/{row_id}",
        question_id=row_id,
        question=question,
        golds=golds,
        prompt_ids=list(tokenizer.encode(prompt, add_special_tokens=False)),
        protocol=protocol.name,
    )
    starts, stops = [0, *(end for _, end, _ in spans)], [*(start for start, _, _ in spans), len(response)]
    for k, (start, stop) in enumerate(zip(starts, stops, strict=True)):
        text = response[start:stop]
        ids = list(tokenizer.encode(text, add_special_tokens=False)) if text else []
        if k == len(spans):
            ids += reply_end_ids(tokenizer, style)  # the model learns to end its reply after its answer
        traj.append(ids, sampled=True, logprobs=[0.0] * len(ids))
        action = protocol.parse(text)
        turn = Turn(text=text, action=_action_name(action), finish_reason="stop", n_gen_tokens=len(ids))
        if isinstance(action, Search):
            turn.queries = list(action.queries)
        elif isinstance(action, Invalid):
            turn.invalid_reason = action.reason
        if k < len(spans):
            observation = spans[k][2]
            obs_ids = list(tokenizer.encode(observation, add_special_tokens=False))
            traj.append(obs_ids, sampled=False)
            turn.observation, turn.n_obs_tokens = observation, len(obs_ids)
        traj.turns.append(turn)
    report = protocol.check_format(response)
    traj.answer = report.answer
    traj.stop_reason = "answer" if report.has_answer else "none"
    unanswered = any(turn.action == "search" and not turn.observation for turn in traj.turns)
    result_tag = protocol.result_tags[0]
    traj.metadata["format_problems"] = [*report.problems, *([f"a search call without {result_tag}"] * unanswered)]
    return traj


def _ends_at_search(traj: Trajectory, protocol: TagProtocol) -> bool:
    """Whether a response ends at a search call of the protocol, with no result after it (a step-level sample)."""
    last = traj.turns[-1] if traj.turns else None
    return bool(last and last.action == "search" and not last.observation) and last.text.rstrip().endswith(
        protocol.search_tags[1]
    )


def _action_name(action: Any) -> str:
    return "search" if isinstance(action, Search) else "answer" if isinstance(action, Answer) else "invalid"


def text_trajectories(
    rows: Iterable[tuple[str, dict[str, Any]]], protocol: Protocol, tokenizer, style: str = "auto", source: str = ""
) -> list[Trajectory]:
    """Every ``(where, row)`` as a trajectory (:func:`text_trajectory`). Rows whose response breaks the protocol's
    format are kept and counted in a warning; when none keeps it and none ends at one of its search calls (a
    step-level search sample, RAG-R1's), the data is in another protocol's tags and a ``ValueError`` says which
    protocol is set."""
    _bind(protocol, tokenizer, style)  # once: a chat frame is worked out by rendering the template
    trajs = [_trajectory(row, protocol, tokenizer, style, where, where) for where, row in rows]
    bad = [t for t in trajs if t.metadata["format_problems"]]
    steps = sum(1 for t in bad if _ends_at_search(t, protocol))
    if trajs and len(bad) == len(trajs) and not steps:
        raise ValueError(
            f"{source or 'text SFT data'}: no response is in the format of protocol '{protocol.name}' (first: "
            f"{', '.join(bad[0].metadata['format_problems'])}); set rollout.protocol to the one whose tags the "
            "data uses"
        )
    if bad:
        console.log(
            f"[yellow]warning:[/yellow] {len(bad)} of {len(trajs)} responses in {source or 'the text SFT data'} "
            f"break protocol '{protocol.name}''s format (first, {bad[0].question_id}: "
            f"{', '.join(bad[0].metadata['format_problems'])}); they are trained on as written"
            + (f"; {steps} of them end at a search call, as step-level search samples do" if steps else "")
        )
    return trajs
