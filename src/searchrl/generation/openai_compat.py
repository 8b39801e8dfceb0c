"""OpenAI-compatible completions backend (vLLM / SGLang / TGI servers, hosted teachers and judges).

Prompts are sent as token ids. With a vLLM server (``return_tokens_as_token_ids``) the sampled ids and log-probs
come back exactly; with other servers only text comes back, so its ids are re-tokenized: fine for teachers and
judges, but do not train on such trajectories (``exact_tokens`` is False on their completions' timings).
"""

from __future__ import annotations

import os
import re
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from searchrl.generation.base import Completion, Generator, SamplingParams
from searchrl.httputil import request_within, server_said
from searchrl.utils import console, error_line

#: what to check when the server refuses a request (a 4xx other than 408 and 429), by status.
_REJECTED = {
    400: "check that the prompt plus max_new_tokens fit the served model's context (vLLM: --max-model-len)",
    401: "set the server's API key in the environment variable the client reads (OPENAI_API_KEY by default)",
    404: "check the URL (it ends in /v1) and the model name the server serves (its /v1/models)",
}
_REJECTED[403] = _REJECTED[401]
_OTHER_4XX = "the server's message names what it could not take (a sampling setting or a model it does not serve)"

#: vLLM's log-prob token under return_tokens_as_token_ids; anything else is text, re-tokenized.
_TOKEN_ID = re.compile(r"token_id:\d+")


def _checked(body) -> dict:
    """A completions reply with a first choice whose text is a string (a reply without one is retried like a failed
    request, then named: it would otherwise surface as a bare KeyError or IndexError)."""
    choices = body.get("choices") if isinstance(body, dict) else None
    first = choices[0] if isinstance(choices, list) and choices else None
    if not isinstance(first, dict) or not isinstance(first.get("text", ""), str):
        raise ValueError(f"a reply without a completion: {str(body)[:160]}")
    return body


class OpenAICompatGenerator(Generator):
    def __init__(
        self,
        base_url: str,
        model: str,
        tokenizer,
        api_key_env: str = "OPENAI_API_KEY",
        timeout_s: float = 120.0,
        retries: int = 3,
        concurrency: int = 1,
    ) -> None:
        """``concurrency``: requests in flight at once (one per prompt; a shared client, which httpx allows across
        threads); the completions come back in the prompts' order either way."""
        self.base_url = base_url.rstrip("/")
        self.concurrency = max(1, concurrency)
        self.model = model
        self.tokenizer = tokenizer
        self.retries = retries
        key = os.environ.get(api_key_env, "")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._key = key or None  # hidden in the server's messages quoted in errors
        self.timeout_s = timeout_s
        self.client = httpx.Client(timeout=timeout_s, headers=headers)
        self._told_inexact = False

    def _post(self, payload: dict) -> dict:
        """One completions request: connection errors, timeouts, 408, 429, 5xx and malformed replies are tried again
        (``retries`` tries in all, 0.5 s then doubling between them); a 4xx is the request's fault and is named at
        once, with the server's message (a prompt longer than its context, an unknown model name, a missing key)."""
        url = f"{self.base_url}/completions"
        last, timed_out = "", False
        for attempt in range(self.retries):
            if attempt:
                time.sleep(0.5 * 2 ** (attempt - 1))
            try:
                r = request_within(self.client, "POST", url, self.timeout_s, json=payload)
            except httpx.HTTPError as err:
                last, timed_out = error_line(err), isinstance(err, httpx.TimeoutException)
                continue
            if r.status_code in (408, 429) or r.status_code >= 500:
                last, timed_out = f"HTTP {r.status_code}: {server_said(r, secret=self._key)}", False
                continue
            if r.status_code >= 400:
                raise ValueError(
                    f"completions server at {self.base_url} rejected the request (HTTP {r.status_code}: "
                    f"{server_said(r, secret=self._key)}); {_REJECTED.get(r.status_code, _OTHER_4XX)}"
                )
            try:
                return _checked(r.json())
            except ValueError as err:
                last, timed_out = error_line(err), False
        fix = "check the URL and that the server is running and speaks the OpenAI completions API"
        if timed_out:
            fix = f"the server is slow or stuck: check it, or give it more than {self.timeout_s:g} s a request"
        where = f"completions server at {self.base_url}"
        raise ConnectionError(f"{where} failed after {self.retries} tries ({last}); {fix}")

    def _tell_inexact(self) -> None:
        if not self._told_inexact:
            self._told_inexact = True
            console.log(
                f"[yellow]warning[/] {self.base_url} returns text, not token ids (vLLM's return_tokens_as_token_ids): "
                "its completions are re-tokenized, which serves teacher data and judges but not RL"
            )

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        if self.concurrency > 1 and len(prompts) > 1:
            with ThreadPoolExecutor(min(self.concurrency, len(prompts))) as pool:
                return list(pool.map(lambda job: self._complete(*job, params), enumerate(prompts)))
        return [self._complete(i, ids, params) for i, ids in enumerate(prompts)]

    def _complete(self, i: int, ids: list[int], params: SamplingParams) -> Completion:
        """The completion of prompt ``i`` of a batch (its seed is the batch's plus ``i``: a group's identical prompts
        must not share one)."""
        t0 = time.perf_counter()
        payload = {
            "model": self.model,
            "prompt": ids,
            "max_tokens": params.max_new_tokens,
            "temperature": max(params.temperature, 0.0),
            "top_p": params.top_p,
            "stop": list(params.stop) or None,
            "include_stop_str_in_output": True,
            "logprobs": 1,
            "return_tokens_as_token_ids": True,
        }
        if params.seed is not None:
            payload["seed"] = params.seed + i
        choice = self._post(payload)["choices"][0]
        text = choice.get("text", "")
        stop_str = next((s for s in params.stop if text.endswith(s)), None)
        fired = choice.get("stop_reason")  # vLLM: the stop string that fired, None for EOS
        if choice.get("finish_reason") == "stop" and stop_str is None and isinstance(fired, str):
            text += fired  # servers that strip the stop string: put back the one that fired
            stop_str = fired
        lp = choice.get("logprobs") or {}
        tokens = lp.get("tokens") or []
        exact = bool(tokens) and all(isinstance(t, str) and _TOKEN_ID.fullmatch(t) for t in tokens)
        if exact:
            token_ids = [int(t.split(":", 1)[1]) for t in tokens]
            logprobs = [float(x) for x in lp.get("token_logprobs", [0.0] * len(token_ids))]
            # the server cuts its text at the end of the stop string, inside the token that completed it
            text = self.tokenizer.decode(token_ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        reason = {"stop": "stop" if stop_str else "eos", "length": "length"}.get(choice.get("finish_reason"), "eos")
        if not exact:
            token_ids = self.tokenizer.encode(text, add_special_tokens=False)
            eos = getattr(self.tokenizer, "eos_token_id", None)
            # as a sampled EOS ends a local completion's ids; only where it surely was one: no stop string could
            # have fired, or the server said none did (a server that strips the stop string and says nothing
            # would otherwise get an EOS after a search call)
            surely = not params.stop or ("stop_reason" in choice and fired is None)
            if reason == "eos" and eos is not None and surely:
                token_ids.append(eos)
            logprobs = [0.0] * len(token_ids)
            self._tell_inexact()
        return Completion(
            token_ids,
            logprobs,
            text,
            reason,
            stop_str,
            {"generate_s": time.perf_counter() - t0, "exact_tokens": float(exact)},
        )
