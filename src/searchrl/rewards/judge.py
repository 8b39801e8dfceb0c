"""LLM-as-judge accuracy through any OpenAI-compatible ``/chat/completions`` endpoint.

R1-Searcher and R1-Searcher++ report "LasJ"/"ACC_L": GPT-4o-mini decides whether a predicted answer matches the
golden answer and replies True/False (spec 000 §1.2 iii, spec 001 §6.2). The papers do not say how the reply is
parsed. Here:

- The prompt is our own wording of the same task (question, golden answers, predicted answer; reply True/False).
  All golden aliases go into one request.
- The reply is parsed by :func:`parse_verdict`. A reply it cannot read becomes ``None``: it is counted separately
  (``judge_unparsed``) and left out of the accuracy, never silently scored as wrong.
- A missing prediction is judged False without a request.
- Raw replies are cached on disk keyed by a hash of (model, prompt version, question, golds, prediction), one JSON
  line ``{"key", "reply"}`` appended as each reply arrives (:func:`cache_in`); verdicts are re-parsed from the cached
  text, so improving the parser needs no new requests.
- Every request has a timeout; connection errors, 429 and 5xx are retried with exponential back-off; other HTTP
  errors fail at once with a message naming the likely fix.

Configuration comes from arguments or the environment: ``SEARCHRL_JUDGE_URL`` (else ``OPENAI_BASE_URL``),
``SEARCHRL_JUDGE_MODEL``, and the API key from ``SEARCHRL_JUDGE_API_KEY`` (else ``OPENAI_API_KEY``; a local server
may need none).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from searchrl.httputil import request_within, server_said
from searchrl.utils import atomic_write_lines, error_line

if TYPE_CHECKING:
    from searchrl.config import EvaluationConfig

#: bump when the prompt text changes, so cached replies to the old prompt are not reused.
PROMPT_VERSION = 4

#: the papers' criterion in our words: correct only when it agrees fully with the golden answer's meaning and key
#: information (no added leniency); several golden answers are aliases, one of which it must agree with.
JUDGE_PROMPT = (
    "Decide whether the predicted answer to a question is correct. It is correct only if it agrees fully with the "
    "meaning and the key information of the golden answer (of one of them, if several are listed).\n"
    "Reply with a single word: True if the predicted answer is correct, False otherwise.\n\n"
    "Question: {question}\n"
    "Golden answer: {golds}\n"
    "Predicted answer: {prediction}"
)

_TRUE_WORDS = {"true", "yes", "correct"}
_FALSE_WORDS = {"false", "no", "incorrect", "wrong"}
#: "not correct", and with up to three words between ("not entirely correct", "not at all true", "not 100% right")
_NEGATED = re.compile(r"\b(?:not|isn't|isnt)\s+(?:\S+\s+){0,3}?(?:correct|true|right)\b")
_WORD = re.compile(r"[a-z']+")


class JudgeError(ValueError):
    """The judge endpoint could not be used (unreachable, bad model name, bad key); the message names the fix."""


@dataclass(frozen=True)
class JudgeVerdict:
    correct: bool | None  # None: the reply could not be parsed
    raw: str  # the judge's reply ("" when no request was made)
    source: str  # "api", "cache" or "skipped" (no prediction)


def parse_verdict(reply: str) -> bool | None:
    """True/False from a judge reply; None when it says neither or both.

    >>> parse_verdict("True"), parse_verdict("**False.**"), parse_verdict("Judgment: correct")
    (True, False, True)
    >>> parse_verdict("The prediction is not correct."), parse_verdict("Maybe"), parse_verdict("True or False")
    (False, None, None)
    """
    text = reply.strip().lower()
    words = _WORD.findall(text)
    if not words:
        return None
    # A reply that follows the instruction starts with the verdict word (and does not name the other one).
    if words[0] in ("true", "false") and not ({"true", "false"} - {words[0]}) & set(words):
        return words[0] == "true"
    text = _NEGATED.sub(" false ", text)
    found = set(_WORD.findall(text))
    says_true, says_false = bool(found & _TRUE_WORDS), bool(found & _FALSE_WORDS)
    if says_true != says_false:
        return says_true
    return None


def judge_prompt(question: str, golds: Sequence[str], prediction: str) -> str:
    """The user message sent to the judge. Each field is one line (its whitespace runs become one space), so an
    answer cannot write lines of its own after it, such as another "Golden answer:" or an instruction."""

    def line(text: str) -> str:
        return " ".join(text.split())

    return JUDGE_PROMPT.format(
        question=line(question), golds=" | ".join(map(line, golds)), prediction=line(prediction)
    )


def summarize_verdicts(verdicts: Sequence[JudgeVerdict]) -> dict[str, float]:
    """``judge``: accuracy over parsed verdicts; ``judge_unparsed``: how many replies could not be read.

    >>> summarize_verdicts([JudgeVerdict(True, "True", "api"), JudgeVerdict(None, "hmm", "api")])
    {'judge': 1.0, 'judge_unparsed': 1.0, 'judge_n': 2.0}
    """
    parsed = [v.correct for v in verdicts if v.correct is not None]
    acc = sum(parsed) / len(parsed) if parsed else float("nan")
    return {"judge": acc, "judge_unparsed": float(len(verdicts) - len(parsed)), "judge_n": float(len(verdicts))}


#: replies a judge without a cache file keeps in memory, the newest first (a judge reward over a long RL run)
MEMO_LIMIT = 100_000


def cache_in(out: str | Path) -> Path:
    """An evaluation directory's judge cache, ``<out>/judge_cache.jsonl``. An earlier version's ``judge_cache.json``
    there (one JSON object, rewritten whole on every batch) becomes it; :class:`LLMJudge` rewrites it as lines."""
    path, old = Path(out) / "judge_cache.jsonl", Path(out) / "judge_cache.json"
    if old.exists() and not path.exists():
        old.rename(path)
    return path


def _cache_line(item: tuple[str, str]) -> str:
    key, reply = item
    return json.dumps({"key": key, "reply": reply}, ensure_ascii=False) + "\n"


class LLMJudge:
    """Judges predictions through an OpenAI-compatible chat completions API, with a disk cache."""

    def __init__(
        self,
        base_url: str | None = None,
        model: str | None = None,
        *,
        api_key: str | None = None,
        cache_path: str | Path | None = None,
        timeout_s: float = 30.0,
        max_retries: int = 3,
        backoff_s: float = 1.0,
        max_tokens: int = 16,
        workers: int = 4,
    ) -> None:
        self.base_url = base_url or os.environ.get("SEARCHRL_JUDGE_URL") or os.environ.get("OPENAI_BASE_URL") or ""
        self.base_url = self.base_url.rstrip("/")
        if not self.base_url:
            raise ValueError(
                "no judge URL: pass base_url, set evaluation.judge_url, or export SEARCHRL_JUDGE_URL "
                "(e.g. http://127.0.0.1:8000/v1)"
            )
        self.model = model or os.environ.get("SEARCHRL_JUDGE_MODEL") or ""
        if not self.model:
            raise ValueError("no judge model: pass model, set evaluation.judge_model, or export SEARCHRL_JUDGE_MODEL")
        if api_key is None:
            api_key = os.environ.get("SEARCHRL_JUDGE_API_KEY") or os.environ.get("OPENAI_API_KEY")
        if timeout_s <= 0 or max_retries < 0 or workers < 1:
            raise ValueError("judge needs timeout_s > 0, max_retries >= 0 and workers >= 1")
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_tokens = max_tokens
        self.workers = workers
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._key = api_key or None  # hidden in the server's messages quoted in errors
        self._client = httpx.Client(timeout=timeout_s, headers=headers)
        self.cache_path = Path(cache_path) if cache_path is not None else None
        self._cache: dict[str, str] = self._load_cache()
        self._lock = threading.Lock()
        self.n_requests = 0  # API calls made (after cache hits), for logs and tests

    # ------------------------------------------------------------------------------------------------ cache

    @classmethod
    def from_config(cls, ev: EvaluationConfig, cache_path: str | Path | None = None) -> LLMJudge:
        """The judge an ``evaluation`` section names (``judge_url``, ``judge_model``, ``judge_timeout_s``,
        ``judge_concurrency``; URL and model may come from the environment instead)."""
        return cls(
            ev.judge_url,
            ev.judge_model,
            timeout_s=ev.judge_timeout_s,
            workers=ev.judge_concurrency,
            cache_path=cache_path,
        )

    def _load_cache(self) -> dict[str, str]:
        """The cached replies, read line by line (a later line wins). A last line cut by a crash is cut off the file,
        so the next reply starts a line of its own; a cache in the earlier format, one JSON object of key -> reply,
        is read whole and rewritten as lines."""
        path = self.cache_path
        if path is None or not path.exists():
            return {}
        if not os.access(path, os.R_OK | os.W_OK):  # replies are appended as they arrive
            raise PermissionError(
                f"judge cache {path} is not readable and writable; chmod u+rw it, or write the evaluation elsewhere"
            )
        with path.open("rb") as f:
            earlier = f.readline().strip() in (b"{", b"{}")  # the earlier format, as json.dumps(indent=0) wrote it
        if earlier:
            return self._migrate()
        cache: dict[str, str] = {}
        good = 0  # the end of the last whole line
        with path.open("r+b") as f:
            for n, line in enumerate(f, 1):
                try:
                    entry = json.loads(line.decode("utf-8"))
                    cache[entry["key"]] = entry["reply"]
                except (UnicodeDecodeError, ValueError, KeyError, TypeError):
                    if line.endswith(b"\n"):  # not the line a crash cut: a damaged file
                        raise ValueError(
                            f"judge cache {path}, line {n}, is not a cached reply; delete it to start afresh"
                        ) from None
                    break
                good += len(line)
            f.truncate(good)
            if good:
                f.seek(good - 1)
                if f.read(1) != b"\n":  # a whole last line that lacks its newline
                    f.write(b"\n")
        return cache

    def _migrate(self) -> dict[str, str]:
        assert self.cache_path is not None
        try:
            data = json.loads(self.cache_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            raise ValueError(f"judge cache {self.cache_path} is not valid JSON; delete it to start afresh") from None
        if not isinstance(data, dict):
            raise ValueError(f"judge cache {self.cache_path} is not a JSON object; delete it to start afresh")
        cache = {str(k): str(v) for k, v in data.items()}
        atomic_write_lines(self.cache_path, map(_cache_line, cache.items()))
        return cache

    def cache_key(self, question: str, golds: Sequence[str], prediction: str) -> str:
        payload = json.dumps([self.model, PROMPT_VERSION, question, list(golds), prediction], ensure_ascii=False)
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()

    # ------------------------------------------------------------------------------------------------ requests

    def _request(self, prompt: str) -> str:
        url = f"{self.base_url}/chat/completions"
        body = {
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "temperature": 0.0,
            "max_tokens": self.max_tokens,
        }
        last_error, timed_out = "", False
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:  # timeout_s bounds the whole answer, so a judge that trickles its reply cannot hold the evaluation
                resp = request_within(self._client, "POST", url, self.timeout_s, json=body)
            except httpx.HTTPError as err:  # connection refused, timeout, ...: worth retrying
                last_error = f"{type(err).__name__}: {error_line(err)}"
                timed_out = isinstance(err, httpx.TimeoutException)
                continue
            with self._lock:
                self.n_requests += 1
            if resp.status_code == 429 or resp.status_code >= 500:
                last_error, timed_out = f"HTTP {resp.status_code}", False
                continue
            if resp.status_code != 200:
                raise JudgeError(
                    f"judge at {url} answered HTTP {resp.status_code}: {server_said(resp, 200, self._key)!r} "
                    "(check the judge model name and the API key in SEARCHRL_JUDGE_API_KEY / OPENAI_API_KEY)"
                )
            try:
                content = resp.json()["choices"][0]["message"]["content"]
            except (ValueError, KeyError, IndexError, TypeError):
                raise JudgeError(
                    f"judge at {url} did not return an OpenAI chat completion: {server_said(resp, 200, self._key)!r} "
                    "(point the judge URL at an OpenAI-compatible /v1 endpoint)"
                ) from None
            return content or ""
        fix = "start the server or fix the judge URL"  # the advice fits the last error, as the message shows it
        if timed_out:
            fix = f"the judge is slow or stuck: check it (each request may take {self.timeout_s:g} s)"
        raise JudgeError(f"judge at {url} failed after {self.max_retries + 1} attempts ({last_error}); {fix}")

    def _fetch(self, item: tuple[str, str]) -> None:
        key, prompt = item
        reply = self._request(prompt)
        with self._lock:
            self._cache[key] = reply
            if self.cache_path is not None:  # on disk as it arrives: a rerun after a stop asks only for the rest
                with self.cache_path.open("a", encoding="utf-8", errors="backslashreplace") as f:
                    f.write(_cache_line((key, reply)))

    def judge(self, question: str, golds: Sequence[str], prediction: str | None) -> JudgeVerdict:
        """One verdict; see :meth:`judge_many`."""
        return self.judge_many([question], [golds], [prediction])[0]

    def judge_many(
        self, questions: Sequence[str], golds: Sequence[Sequence[str]], predictions: Sequence[str | None]
    ) -> list[JudgeVerdict]:
        """Verdicts in input order. Cached replies are reused; the rest are requested concurrently."""
        if not (len(questions) == len(golds) == len(predictions)):
            raise ValueError("judge_many needs as many golds and predictions as questions")
        golds = [[g] if isinstance(g, str) else list(g) for g in golds]
        out: list[JudgeVerdict | None] = [None] * len(questions)
        todo: list[tuple[int, str, str]] = []  # (index, cache key, prompt)
        for i, (q, gs, pred) in enumerate(zip(questions, golds, predictions, strict=True)):
            if pred is None or not pred.strip():
                out[i] = JudgeVerdict(False, "", "skipped")
                continue
            key = self.cache_key(q, gs, pred)
            if key in self._cache:
                raw = self._cache[key]
                out[i] = JudgeVerdict(parse_verdict(raw), raw, "cache")
            else:
                todo.append((i, key, judge_prompt(q, gs, pred)))
        if todo:
            # Identical items in one batch share one request. Each reply is cached as soon as it arrives (appended to
            # the cache file), so a rerun after a failed request resumes where this one stopped.
            unique = {key: prompt for _, key, prompt in todo}
            with ThreadPoolExecutor(max_workers=min(self.workers, len(unique))) as pool:
                list(pool.map(self._fetch, unique.items()))
            with self._lock:  # newest last in the batch's order, not the order the replies arrived in
                for key in unique:
                    self._cache[key] = self._cache.pop(key)
            for i, key, _ in todo:
                raw = self._cache[key]
                out[i] = JudgeVerdict(parse_verdict(raw), raw, "api")
        if self.cache_path is None and len(self._cache) > MEMO_LIMIT:  # an RL run judges millions of answers: keep
            for key in list(islice(self._cache, len(self._cache) - MEMO_LIMIT)):  # the newest replies only
                del self._cache[key]
        return [v for v in out if v is not None]

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> LLMJudge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
