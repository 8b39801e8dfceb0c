"""Evaluating a policy served by an OpenAI-compatible completions server (``evaluation.policy_url``, ``searchrl eval
--policy-url``): the same answers as the same policy run here, with requests in flight together."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import searchrl.pipeline
from searchrl.config import load_config, with_overrides
from searchrl.eval.harness import eval_generator, run_from_config
from searchrl.generation.base import SamplingParams
from searchrl.generation.fake import ByteTokenizer
from searchrl.generation.openai_compat import OpenAICompatGenerator

TOK = ByteTokenizer()


def agent_reply(ctx: str) -> str:
    """Search for the question's key word, then answer from what came back (Search-R1's tags)."""
    if "<information>" not in ctx.split("Question:")[-1]:
        key = "anna" if "Anna Berg" in ctx else "blue" if "Blue Lake" in ctx else "oslo"
        return f"<think>I should look it up.</think>\n<search>{key}</search>"
    docs = ctx.rsplit("<information>", 1)[-1]
    return f"<answer>{'Rome' if 'Rome' in docs else 'Tom Hale' if 'Hale' in docs else 'yes'}</answer>"


class Served:
    """A completions server over a scripted model, returning exact token ids as vLLM does; counts requests in
    flight."""

    def __init__(self, reply) -> None:
        served = self
        self.lock, self.now, self.most, self.seeds = threading.Lock(), 0, 0, []

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with served.lock:
                    served.now += 1
                    served.most = max(served.most, served.now)
                    served.seeds.append(body.get("seed"))
                threading.Event().wait(0.02)  # long enough for the other requests of a batch to arrive
                text = reply(TOK.decode(body["prompt"], skip_special_tokens=True))
                cuts = [(text.find(s) + len(s), s) for s in body["stop"] or () if s in text]
                end, stop = min(cuts) if cuts else (len(text), None)
                ids = TOK.encode(text[:end]) + ([] if stop else [TOK.eos_token_id])
                choice = {
                    "text": text[:end],
                    "finish_reason": "stop",
                    "stop_reason": stop,
                    "logprobs": {"tokens": [f"token_id:{i}" for i in ids], "token_logprobs": [-0.1] * len(ids)},
                }
                with served.lock:
                    served.now -= 1
                data = json.dumps({"choices": [choice]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def served():
    s = Served(agent_reply)
    yield s
    s.server.shutdown()


def test_batched_requests_go_out_together_and_come_back_in_order(served) -> None:
    gen = OpenAICompatGenerator(served.url, "policy", TOK, timeout_s=10, concurrency=4)
    prompts = [TOK.encode(f"Question: about {w}") for w in ("Anna Berg", "Blue Lake", "Oslo", "Anna Berg")] * 2
    out = gen.generate(prompts, SamplingParams(max_new_tokens=64, stop=("</search>",), seed=7))
    assert [c.text.split("<search>")[1] for c in out] == [
        "anna</search>",
        "blue</search>",
        "oslo</search>",
        "anna</search>",
    ] * 2
    assert 1 < served.most <= 4 and sorted(served.seeds) == list(range(7, 15))
    assert all(c.finish_reason == "stop" and c.timings["exact_tokens"] == 1.0 for c in out)


def test_evaluation_through_a_policy_url_answers_as_the_policy_run_here(served, qa_file, fakes, tmp_path, monkeypatch):
    monkeypatch.setattr(searchrl.pipeline, "load_tokenizer", lambda spec: TOK)
    over = [
        f"evaluation.datasets=[{qa_file}]",
        "evaluation.methods=[agent]",
        "rollout.protocol=search_r1",
        "evaluation.limit=null",
    ]
    cfg = load_config("demo", [*over, f"evaluation.policy_url={served.url}", "evaluation.served_model=served-name"])
    gen = eval_generator(cfg)
    assert isinstance(gen, OpenAICompatGenerator) and (gen.model, gen.concurrency) == ("served-name", 16)
    remote_cfg = with_overrides(cfg, [f"evaluation.output_dir={tmp_path / 'remote'}"])
    remote = run_from_config(remote_cfg, retriever=fakes.KeywordRetriever(), show=False)
    local_cfg = load_config("demo", [*over, f"evaluation.output_dir={tmp_path / 'local'}"])
    local = run_from_config(
        local_cfg, generator=fakes.scripted(agent_reply), retriever=fakes.KeywordRetriever(), show=False
    )
    assert served.most > 1  # the three questions' turns were asked together
    answers = {(it["id"], it["prediction"]) for it in remote.items}
    assert answers == {(it["id"], it["prediction"]) for it in local.items}
    assert answers == {("q1", "Rome"), ("q2", "Tom Hale"), ("q3", "yes")}
