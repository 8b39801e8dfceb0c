"""The OpenAI-compatible backend against a server that returns text only (not vLLM's token ids): the ids are the
re-tokenized text, an EOS ending keeps its EOS id as a local completion does, and the run is told once; and against
servers that fail: malformed replies and timeouts are retried, then named in one line."""

from __future__ import annotations

import json
import threading

import httpx
import pytest

from searchrl import utils
from searchrl.generation.base import SamplingParams
from searchrl.generation.fake import ByteTokenizer
from searchrl.generation.openai_compat import OpenAICompatGenerator


def test_a_text_only_server_gives_re_tokenized_ids_ending_in_eos_and_one_warning(monkeypatch) -> None:
    tok = ByteTokenizer()
    # EOS (the server says no stop string fired), the length cut, a stop string, and a stripped stop string the
    # server does not name: "eos" by its finish, but no EOS id is made up for it
    replies = iter(
        [
            ("The answer.", "stop", None),
            ("cut sh", "length", None),
            ("Search [q]", "stop", "]"),
            ("Search [q", "stop", "unsaid"),
        ]
    )

    def handler(request: httpx.Request) -> httpx.Response:
        text, finish, fired = next(replies)
        choice = {"text": text, "finish_reason": finish} | ({} if fired == "unsaid" else {"stop_reason": fired})
        return httpx.Response(200, json={"choices": [choice]})

    gen = OpenAICompatGenerator("http://teacher.test/v1", "teacher", tok, timeout_s=5.0)
    gen.client = httpx.Client(transport=httpx.MockTransport(handler), timeout=5.0)
    monkeypatch.setattr(utils.console, "width", 400)
    with utils.console.capture() as cap:
        eos, length, stop, unsaid = gen.generate([[1, 2]] * 4, SamplingParams(max_new_tokens=8, stop=("]",)))
    assert (eos.finish_reason, eos.token_ids) == ("eos", tok.encode("The answer.") + [tok.eos_token_id])
    assert length.token_ids == tok.encode("cut sh") and tok.eos_token_id not in length.token_ids
    assert (stop.finish_reason, stop.text, stop.token_ids[-1]) == ("stop", "Search [q]", tok.encode("]")[-1])
    assert cap.get().count("returns text, not token ids") == 1
    assert unsaid.finish_reason == "eos" and unsaid.token_ids == tok.encode("Search [q")


def test_a_reply_without_a_completion_is_retried_then_named(monkeypatch) -> None:
    """A teacher that answers 200 with no choices, an empty list or a null text is retried like a failed request;
    a reply that stays malformed ends in one line naming the server and what came back (not a bare KeyError)."""
    from searchrl.generation import openai_compat

    monkeypatch.setattr(openai_compat.time, "sleep", lambda s: None)
    tok = ByteTokenizer()
    for bad in ({}, {"choices": []}, {"choices": [{"text": None, "finish_reason": "stop"}]}, ["x"]):
        replies = iter([bad, {"choices": [{"text": "fine", "finish_reason": "length"}]}])
        gen = OpenAICompatGenerator("http://teacher.test/v1", "teacher", tok, timeout_s=5.0, retries=2)
        gen.client = httpx.Client(
            transport=httpx.MockTransport(lambda r, it=replies: httpx.Response(200, json=next(it))), timeout=5.0
        )
        (out,) = gen.generate([[1, 2]], SamplingParams(max_new_tokens=8))
        assert out.text == "fine"  # the second try's reply
        always = httpx.MockTransport(lambda r, body=bad: httpx.Response(200, json=body))
        gen.client = httpx.Client(transport=always, timeout=5.0)
        with pytest.raises(ConnectionError, match="failed after 2 tries .a reply without a completion"):
            gen.generate([[1, 2]], SamplingParams(max_new_tokens=8))


def test_a_teacher_that_times_out_is_retried_then_named_and_concurrency_may_exceed_the_prompts(monkeypatch) -> None:
    """A timed-out request is tried again (the reply of a later try is used); a server that keeps timing out ends in
    one line naming it. Eight requests in flight for two prompts give the two completions in the prompts' order."""
    from searchrl.generation import openai_compat

    monkeypatch.setattr(openai_compat.time, "sleep", lambda s: None)
    tok = ByteTokenizer()
    calls = {"n": 0}
    lock = threading.Lock()

    def flaky(request: httpx.Request) -> httpx.Response:
        with lock:  # requests come from several threads
            calls["n"] += 1
            first = calls["n"] == 1
        if first:
            raise httpx.ReadTimeout("timed out", request=request)
        prompt = json.loads(request.content)["prompt"]
        return httpx.Response(200, json={"choices": [{"text": f"reply {prompt[0]}", "finish_reason": "length"}]})

    gen = OpenAICompatGenerator("http://teacher.test/v1", "teacher", tok, timeout_s=5.0, retries=3, concurrency=8)
    gen.client = httpx.Client(transport=httpx.MockTransport(flaky), timeout=5.0)
    outs = gen.generate([[7], [9]], SamplingParams(max_new_tokens=8))
    assert [o.text for o in outs] == ["reply 7", "reply 9"] and calls["n"] == 3

    def dead(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    gen.client = httpx.Client(transport=httpx.MockTransport(dead), timeout=5.0)
    with pytest.raises(ConnectionError, match=r"teacher.test/v1 failed after 3 tries \(timed out\)"):
        gen.generate([[7]], SamplingParams(max_new_tokens=8))


def test_a_rejected_request_is_named_at_once_on_one_line_with_the_servers_message(monkeypatch) -> None:
    """A 4xx is the request's fault (a prompt past the served context, an unknown model name): it is not tried again,
    and the one-line error carries what the server said and what to check, not httpx's two-line status text."""
    from searchrl.generation import openai_compat

    monkeypatch.setattr(openai_compat.time, "sleep", lambda s: None)
    too_long, unknown = "This model's maximum context length is 2048 tokens.", "The model `teacher` does not exist."
    said = {  # vLLM's error body, then OpenAI's
        400: ({"object": "error", "message": too_long, "code": 400}, too_long, "max-model-len"),
        404: ({"error": {"message": unknown, "type": "NotFoundError"}}, unknown, "/v1/models"),
        422: ({"detail": "top_p must be in (0, 1]"}, "top_p must be in (0, 1]", "names what it could not take"),
    }
    for status, (body, text, fix) in said.items():
        calls = []
        gen = OpenAICompatGenerator("http://teacher.test/v1", "teacher", ByteTokenizer(), timeout_s=5.0, retries=3)
        answer = httpx.MockTransport(lambda r, c=calls, s=status, b=body: c.append(1) or httpx.Response(s, json=b))
        gen.client = httpx.Client(transport=answer)
        with pytest.raises(ValueError) as caught:
            gen.generate([[1, 2]], SamplingParams(max_new_tokens=8))
        message = str(caught.value)
        assert len(calls) == 1 and "\n" not in message
        assert f"rejected the request (HTTP {status}: {text}); " in message
        assert fix in message


def test_a_server_that_trickles_its_reply_times_out_and_says_so(monkeypatch, trickling) -> None:
    """Each piece of the body comes quickly but the whole never ends: only a deadline on the whole answer stops the
    request (here a clock that moves one second a piece, timeout 5 s); the error names the timeout."""
    from searchrl.generation import openai_compat

    monkeypatch.setattr(openai_compat.time, "sleep", lambda s: None)
    transport, pieces = trickling
    gen = OpenAICompatGenerator("http://teacher.test/v1", "teacher", ByteTokenizer(), timeout_s=5.0, retries=2)
    gen.client = httpx.Client(transport=transport)
    with pytest.raises(ConnectionError, match=r"failed after 2 tries \(the answer took over 5 s\);.* more than 5 s"):
        gen.generate([[1, 2]], SamplingParams(max_new_tokens=8))
    assert len(pieces) < 20


def test_token_ids_are_taken_only_when_every_token_is_a_well_formed_token_id() -> None:
    """vLLM's ``token_id:<n>`` tokens give the ids exactly; a server whose tokens only look like them (a malformed
    number) is read as text and re-tokenized, not stopped by a bare int() error."""
    tok = ByteTokenizer()
    ids = tok.encode("Paris")
    lps = {"tokens": [f"token_id:{i}" for i in ids], "token_logprobs": [-0.5] * len(ids)}
    odd = {"tokens": ["token_id:7x", "token_id:"], "token_logprobs": [-0.1, -0.2]}
    replies = iter([lps, odd])

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, json={"choices": [{"text": "Paris", "finish_reason": "length", "logprobs": next(replies)}]}
        )

    gen = OpenAICompatGenerator("http://policy.test/v1", "policy", tok, timeout_s=5.0)
    gen.client = httpx.Client(transport=httpx.MockTransport(handler), timeout=5.0)
    exact, inexact = gen.generate([[1, 2]] * 2, SamplingParams(max_new_tokens=8))
    assert (exact.token_ids, exact.logprobs, exact.timings["exact_tokens"]) == (ids, [-0.5] * len(ids), 1.0)
    assert (inexact.token_ids, inexact.timings["exact_tokens"]) == (tok.encode("Paris"), 0.0)


def test_a_server_quoting_the_api_key_in_its_error_does_not_put_it_in_ours(monkeypatch) -> None:
    """The server's message is quoted in the error (which goes to logs and terminals); a key it echoes is hidden."""
    from searchrl.generation import openai_compat

    monkeypatch.setattr(openai_compat.time, "sleep", lambda s: None)
    monkeypatch.setenv("TEACHER_KEY", "sk-secret-123")

    def handler(request: httpx.Request) -> httpx.Response:
        said = f"no access with key {request.headers['Authorization'].split()[-1]}"
        return httpx.Response(403 if request.url.path.endswith("v1/completions") else 503, json={"message": said})

    for url in ("http://teacher.test/v1", "http://teacher.test/busy"):
        gen = OpenAICompatGenerator(url, "teacher", ByteTokenizer(), api_key_env="TEACHER_KEY", retries=1)
        gen.client = httpx.Client(transport=httpx.MockTransport(handler), headers=gen.client.headers)
        with pytest.raises((ValueError, ConnectionError), match=r"no access with key \*\*\*") as err:
            gen.generate([[1, 2]], SamplingParams(max_new_tokens=8))
        assert "sk-secret" not in str(err.value)
