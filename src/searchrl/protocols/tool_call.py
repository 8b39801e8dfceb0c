"""JSON tool calls through the chat template (the Qwen2.5 / Qwen3 / Hermes format): our own protocol [O], no paper's.

The search engine is a function declared once as a JSON schema (:func:`search_tool`: name ``search``, argument
``queries``, an array of one to ``max_queries`` strings). The prompt is the tokenizer's chat template rendered with
``tools=[schema]``; the model calls the tool with::

    <tool_call>
    {"name": "search", "arguments": {"queries": ["first query", "second query"]}}
    </tool_call>

(``{"query": "one query"}`` is accepted too) and gets the documents back as a ``tool`` message rendered by the
template; it ends with a plain assistant message that holds the answer inside ``<answer>...</answer>``, so the
answer rewards and answer extraction are the other protocols'. Generation stops after ``</tool_call>`` and after
``</answer>``.

The text inserted after a tool call is exactly what the template puts between the end of the assistant's message
and the next assistant generation, with the reply in it (``searchrl.protocols.chat_frame``), so a trajectory's
prompt and response ids are the template's own rendering of the conversation. The rollout engine binds the protocol
to its tokenizer (:meth:`ToolCallProtocol.bind_tokenizer`); before that it assumes ChatML with the Hermes fallback
below, which is what SmolLM2 and Qwen render. Templates without tool support (SmolLM2-135M-Instruct, the bundled
model) get the Hermes fallback: the schema in the system prompt inside ``<tools>...</tools>``, each reply a ``user``
message ``<tool_response>...</tool_response>``. Without a chat template (``model.prompt_style: raw``) the same text
is plain.

Every environment reply is such a message: the documents, the feedback on an invalid call (malformed JSON, another
tool, missing / empty / non-string queries: ``Invalid`` with a reason code, never an exception) and the notice that
the search budget is spent. A multi-query call fans out into one retrieval per query in the engine's batched call,
like RAG-R1's multi-query search; more than ``max_queries`` queries keep the first ones and fail the format check.
Options: ``max_queries`` (default ``rollout.max_queries_per_call``) and ``max_query_chars`` (see ``TagProtocol``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from searchrl.protocols._tags import (
    BAD_ARGUMENTS,
    BAD_JSON,
    EMPTY_QUERY,
    NO_ACTION,
    QUERY_TOO_LONG,
    UNKNOWN_TOOL,
    Event,
    TagProtocol,
    blocks,
    count_tag,
    scan,
)
from searchrl.protocols.base import FormatReport, Invalid, format_scheme
from searchrl.protocols.chat_frame import CHATML_FRAME, RESPONSE_TAGS, ChatFrame, frame_for
from searchrl.retrieval.base import Hit

CALL = ("<tool_call>", "</tool_call>")
ANSWER = ("<answer>", "</answer>")
SEARCH_TOOL_NAME = "search"
OVER_BUDGET = "over_budget"  # the notice after a call past the search budget (not an invalid action)


def search_tool(max_queries: int = 3) -> dict[str, Any]:
    """The search tool's OpenAI-style function schema, the one place it is written (``tools=[search_tool()]``)."""
    many = f"one or more search queries (at most {max_queries})" if max_queries > 1 else "one search query"
    return {
        "type": "function",
        "function": {
            "name": SEARCH_TOOL_NAME,
            "description": "Search the knowledge source; returns the top documents for each query.",
            "parameters": {
                "type": "object",
                "properties": {
                    "queries": {
                        "type": "array",
                        "items": {"type": "string"},
                        "minItems": 1,
                        "maxItems": max_queries,
                        "description": f"{many}, each a few keywords",
                    }
                },
                "required": ["queries"],
            },
        },
    }


def call_text(queries: list[str] | tuple[str, ...]) -> str:
    """A search call as the model writes it (the template's own layout of a tool call)."""
    call = {"name": SEARCH_TOOL_NAME, "arguments": {"queries": list(queries)}}
    return f"{CALL[0]}\n{json.dumps(call, ensure_ascii=False)}\n{CALL[1]}"


def call_queries(content: str) -> list[str] | Invalid:
    """The queries of one tool call's JSON (uncleaned), or why it is invalid."""
    try:
        call = json.loads(content)
    except (ValueError, RecursionError):
        return Invalid(BAD_JSON)
    if not isinstance(call, dict):
        return Invalid(BAD_JSON)
    if call.get("name") != SEARCH_TOOL_NAME:
        return Invalid(UNKNOWN_TOOL)
    # Llama 3.1 / 3.2's chat templates ask for {"name", "parameters"}: the same arguments under another key
    args = call["arguments"] if "arguments" in call else call.get("parameters")
    if isinstance(args, str):  # OpenAI's wire format: the arguments as a JSON string
        try:
            args = json.loads(args)
        except (ValueError, RecursionError):
            return Invalid(BAD_ARGUMENTS)
    if not isinstance(args, dict) or len(args) != 1 or not set(args) <= {"queries", "query"}:
        return Invalid(BAD_ARGUMENTS)
    if "query" in args:
        return [args["query"]] if isinstance(args["query"], str) else Invalid(BAD_ARGUMENTS)
    queries = args["queries"]
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        return Invalid(BAD_ARGUMENTS)
    return queries


INSTRUCTION = (
    "Answer the question below. To look something up, call the search tool with {many}, for example\n"
    "{example}\n"
    "The results come back in a tool response (<tool_response> ... </tool_response>). Search as often as you "
    "need. When you know the answer, reply with a plain message that gives the final answer inside <answer> and "
    "</answer>, without a detailed explanation, e.g. <answer>Beijing</answer>.\n"
    "Question: {question}\n"
)

HERMES_SYSTEM = (
    "You can call functions to help with the user's request. The functions are described by the JSON signatures "
    "inside <tools></tools>:\n<tools>\n{tools}\n</tools>\n\n"
    "To call a function, write a JSON object with its name and arguments inside <tool_call></tool_call>:\n"
    '<tool_call>\n{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>\n'
    "The result comes back inside <tool_response></tool_response>."
)

#: the environment's reply to an invalid action (what was wrong), before how to act.
NOTICES = {
    NO_ACTION: "Error: the last message held neither a complete tool call nor a final answer.",
    EMPTY_QUERY: "Error: the search call held no query.",
    QUERY_TOO_LONG: "Error: a search query was far too long for a search engine.",
    BAD_JSON: "Error: the tool call was not a valid JSON object.",
    UNKNOWN_TOOL: f"Error: the tool call named a tool that does not exist; the only tool is {SEARCH_TOOL_NAME}.",
    BAD_ARGUMENTS: 'Error: the search arguments must be {"queries": [...]} with one or more query strings.',
}
HOW = "To search, call the tool: {example} To finish, give the final answer inside <answer> and </answer>."
OVER_BUDGET_NOTICE = (
    "The search budget is used up, so this call was not run. Give the final answer now, inside <answer> and </answer>."
)


class ToolCallProtocol(TagProtocol):
    name = "tool_call"
    stop_strings = (CALL[1],)
    answer_stop_strings = (ANSWER[1],)
    search_tags = CALL
    result_tags = RESPONSE_TAGS
    document_start = re.compile(r'(?m)(?P<head>^Results for ")|Doc (?P<n>\d+)\(Title: ')
    answer_tags = ANSWER
    option_defaults = {**TagProtocol.option_defaults, "max_queries": 3}

    @classmethod
    def options_from_rollout(cls, rollout: Any) -> dict[str, Any]:
        return {"max_queries": rollout.max_queries_per_call}

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.max_queries = self.options["max_queries"]
        #: where replies sit in the chat template (:meth:`bind_tokenizer`); ChatML + Hermes until bound.
        self.frame: ChatFrame = CHATML_FRAME

    # ------------------------------------------------------------------------------------- tools and template
    def tools(self) -> list[dict[str, Any]]:
        return [search_tool(self.max_queries)]

    def chat_tools(self) -> list[dict[str, Any]] | None:
        return self.tools() if self.frame.kind == "tools" else None

    def bind_tokenizer(self, tokenizer: Any, style: str = "auto") -> None:
        """Work out the frame of ``tokenizer``'s chat template (see ``searchrl.protocols.chat_frame``)."""
        if tokenizer is not None:
            user = {"role": "user", "content": self.instruction("?")}
            hermes = [{"role": "system", "content": self.hermes_system()}, user]
            self.frame = frame_for(tokenizer, style, self.tools(), {"tools": [user], "hermes": hermes})
        super().bind_tokenizer(tokenizer, style)

    # ------------------------------------------------------------------------------------------------ prompt
    def hermes_system(self) -> str:
        return HERMES_SYSTEM.format(tools="\n".join(json.dumps(t, ensure_ascii=False) for t in self.tools()))

    def system_prompt(self) -> str | None:
        return None if self.frame.kind == "tools" else self.hermes_system()

    def _example(self) -> str:
        return call_text(["first query", "second query"][: self.max_queries])

    def instruction(self, question: str) -> str:
        n = self.max_queries
        many = f"one or more queries (at most {n}) in each call" if n > 1 else "one query"
        return INSTRUCTION.format(many=many, example=self._example(), question=question.strip())

    # ------------------------------------------------------------------------------------- what the model writes
    def format_search(self, queries: list[str] | tuple[str, ...]) -> str:
        return call_text(queries)

    def format_answer(self, answer: str) -> str:
        return f"{ANSWER[0]}{answer}{ANSWER[1]}"

    def format_reasoning(self, text: str) -> str:
        return f"{text}\n"

    def _split_queries(self, content: str) -> list[str] | Invalid:
        return call_queries(content)

    # ------------------------------------------------------------------------------------- what is inserted
    def _clean_hits(self, queries: list[str], hits: list[list[Hit]]) -> list[list[Hit]]:
        """Shapes checked, reply tags and the template's special tokens blanked out of the documents (they would
        end the reply early or be tokenized as the template's own markers)."""
        hits = self._prepared(queries, hits)
        special = self.frame.special
        if not special:
            return hits
        out = []
        for per_query in hits:
            fixed = []
            for h in per_query:
                title, text = h.title, h.text
                for s in special:
                    title, text = title.replace(s, " "), text.replace(s, " ")
                fixed.append(h if (title, text) == (h.title, h.text) else Hit(h.id, title, text, h.score))
            out.append(fixed)
        return out

    @staticmethod
    def _docs(hits: list[Hit]) -> str:
        if not hits:
            return "No documents found."
        return "\n".join(f"Doc {i}(Title: {h.title}) {h.text}" for i, h in enumerate(hits, start=1))

    def tool_reply(self, queries: list[str], hits: list[list[Hit]]) -> str:
        """The tool message's content: the documents (one section per query when there are several)."""
        hits = self._clean_hits(queries, hits)
        if len(queries) == 1:
            return self._docs(hits[0])
        return "\n\n".join(f'Results for "{q}":\n{self._docs(h)}' for q, h in zip(queries, hits, strict=True))

    def render_observation(self, queries: list[str], hits: list[list[Hit]]) -> str:
        return self.frame.wrap(self.tool_reply(queries, hits))

    def observation_suffix(self) -> str:
        return self.frame.close

    def observation_documents(self, observation: str) -> str:
        f = self.frame
        framed = observation.startswith(f.open) and observation.endswith(f.close)
        if framed and len(observation) >= len(f.open) + len(f.close):
            return observation[len(f.open) : len(observation) - len(f.close)]
        return super().observation_documents(observation)

    def _how(self) -> str:
        return HOW.format(example=call_text(["a query"]))

    def _notice_bodies(self) -> dict[str, str]:
        """Reply content -> reason, for every notice this protocol inserts."""
        bodies = {f"{lead} {self._how()}": reason for reason, lead in NOTICES.items()}
        bodies[OVER_BUDGET_NOTICE] = OVER_BUDGET
        return bodies

    def invalid_feedback(self, action: Invalid) -> str:
        lead = NOTICES.get(action.reason, NOTICES[NO_ACTION])
        return self.frame.wrap(f"{lead} {self._how()}")

    def over_budget_text(self) -> str:
        return self.frame.wrap(OVER_BUDGET_NOTICE)

    def force_answer_text(self) -> str:
        """Opens the forced final turn (after the engine's last reply, so in the assistant's own voice)."""
        return "I have used up my searches, so I will give the final answer now, inside <answer> and </answer>.\n"

    # ------------------------------------------------------------------------------------------------ format
    def _split_turns(self, text: str) -> tuple[list[str], list[tuple[str, str]]]:
        """The model's turns and the replies between them: ``turns[k]`` is followed by ``replies[k]``, a
        ``(kind, content)`` with kind ``documents``, a notice reason, or ``unclosed`` (a reply cut off)."""
        f, notices = self.frame, self._notice_bodies()
        turns: list[str] = []
        replies: list[tuple[str, str]] = []
        pos = 0
        while True:
            start = text.find(f.open_decoded, pos)
            if start < 0:
                turns.append(text[pos:])
                return turns, replies
            turns.append(text[pos:start])
            body_at = start + len(f.open_decoded)
            end = text.find(f.close_decoded, body_at)
            if end < 0:
                replies.append(("unclosed", text[body_at:]))
                turns.append("")
                return turns, replies
            body = text[body_at:end]
            replies.append((notices.get(body, "documents"), body))
            pos = end + len(f.close_decoded)

    def check_format(self, response: str) -> FormatReport:
        """Well-formed: every turn but the last is free text then one valid search call (JSON, the right tool and
        arguments, at most ``max_queries`` queries) answered by the documents; the last turn is free text then
        exactly one non-empty ``<answer>`` block and nothing after it; no ``<tool_response>`` written by the model.

        ``response`` is the trajectory's decoded response (special tokens skipped, or kept: they are dropped
        first). ``answer``: the last complete ``<answer>`` block (stripped); ``n_searches``: calls answered with
        documents. ``extra``: ``n_tool_calls``, ``n_invalid_calls``, ``n_queries``, ``queries_per_call``,
        ``n_notices`` (error and budget replies), ``n_fabricated_responses``.
        """
        text = self.frame.visible(self.response_opening + response).replace(self.force_answer_text(), "")
        turns, replies = self._split_turns(text)
        problems: list[str] = []
        answers: list[str] = []
        per_call: list[int] = []
        n_invalid = n_fabricated = 0
        last = len(turns) - 1
        for k, turn in enumerate(turns):
            events = scan(turn, self.all_tags, CALL[1], *RESPONSE_TAGS)
            fabricated = count_tag(events, RESPONSE_TAGS[0]) + sum(1 for ev in events if ev.kind.startswith("obs"))
            if fabricated:
                n_fabricated += fabricated
                problems.append(f"turn {k + 1}: the model wrote a {RESPONSE_TAGS[0]} itself")
            calls, turn_answers = blocks(events, *CALL), blocks(events, *ANSWER)
            if not (calls.balanced and turn_answers.balanced):
                problems.append(f"turn {k + 1}: an unclosed or stray {CALL[0]} / {ANSWER[0]} tag")
            for content in calls.contents:
                n, problem = self._call_problem(content)
                per_call.append(n)
                if problem:
                    n_invalid += 1
                    problems.append(f"turn {k + 1}: {problem}")
            answers += turn_answers.contents
            if k < last:
                problems += self._turn_before_reply(k, turn, events, replies[k], len(calls.contents))
            else:
                problems += self._last_turn(turn, turn_answers.contents, len(calls.contents))
        if len(answers) > 1:
            problems.append(f"{len(answers)} <answer> blocks (exactly one expected)")
        answer = answers[-1].strip() if answers else None
        if answer == "":
            problems.append("empty <answer>")
        return FormatReport(
            ok=not problems,
            has_answer=answer is not None,
            answer=answer,
            n_searches=sum(1 for kind, _ in replies if kind == "documents"),
            problems=tuple(problems),
            extra={
                "n_tool_calls": len(per_call),
                "n_invalid_calls": n_invalid,
                "n_queries": sum(min(n, self.max_queries) for n in per_call),
                "queries_per_call": per_call,
                "n_notices": sum(1 for kind, _ in replies if kind not in ("documents", "unclosed")),
                "n_fabricated_responses": n_fabricated,
            },
        )

    def _call_problem(self, content: str) -> tuple[int, str]:
        """``(queries in the call, problem or "")`` for one tool call's content."""
        split = self._split_queries(content)
        if isinstance(split, Invalid):
            return 0, f"tool call is invalid ({split.reason})"
        queries = [q for q in (self._clean_query(raw) for raw in split) if q]
        if not queries:
            return 0, f"tool call is invalid ({EMPTY_QUERY})"
        if any(len(q) > self.max_query_chars for q in queries):
            return len(queries), f"tool call is invalid ({QUERY_TOO_LONG})"
        if len(queries) > self.max_queries:
            return len(queries), f"tool call with {len(queries)} queries (at most {self.max_queries})"
        return len(queries), ""

    def _turn_before_reply(
        self, k: int, turn: str, events: list[Event], reply: tuple[str, str], n_calls: int
    ) -> list[str]:
        kind = reply[0]
        if kind == "unclosed":
            return [f"turn {k + 1}: the reply after it is cut off"]
        if kind != "documents":
            return [f"turn {k + 1} got a notice ({kind})"]
        problems = []
        if n_calls != 1 or not turn.rstrip().endswith(CALL[1]):
            problems.append(f"turn {k + 1}: documents follow a turn that does not end with one tool call")
        if count_tag(events, ANSWER[0]):
            problems.append(f"turn {k + 1}: an <answer> before the last turn")
        return problems

    def _last_turn(self, turn: str, answers: list[str], n_calls: int) -> list[str]:
        problems = []
        if n_calls:
            problems.append("a tool call in the last turn got no reply")
        if not answers:
            problems.append("the response does not end with an <answer> block")
        elif turn[turn.rfind(ANSWER[1]) + len(ANSWER[1]) :].strip():
            problems.append("text after </answer>")
        return problems


# ------------------------------------------------------------------------------------------- format reward


@format_scheme("tool_call")
def tool_call_format(report: FormatReport, n_searches: int, evidence: str | None, *, penalty: float = -1.0) -> float:
    """0 if the tool_call format check passes, else ``penalty`` (-1) [O]: every call valid JSON of the search
    schema answered by documents, then exactly one ``<answer>``."""
    return 0.0 if report.ok else penalty
