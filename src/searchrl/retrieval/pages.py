"""Web pages for online search: fetch each search result's page safely, extract its text, and optionally condense it
for the query with a summariser model.

R1-Searcher, R1-Searcher++ and RAG-R1 evaluate with online search (specs 001 §4.4 / §11.6, 000 §6, 004 §6.3): a
search API gives result links, the pages are fetched and scraped (RAG-R1: BeautifulSoup4), and because pages are
long a model (GPT-4o-mini in the papers) summarises each one before it is inserted into the reasoning. The papers
leave the page count, truncation and summary prompt unstated; R1-Searcher's code truncates a page at 35,000
characters, asks for a summary paragraph of what is relevant to the search query (or "None"), and inserts the
first useful summary. Our choices, all configurable (``retrieval.web``):

- :class:`PageFetcher` fetches with httpx and never hangs: every request has a timeout, and each page has a
  deadline for the whole fetch (robots.txt, redirects and body included), so a server that trickles bytes is cut
  off too; ``fetch_many`` fetches ``max_workers`` pages at a time and returns within the deadline per round of
  them even if a worker is still blocked (e.g. in DNS resolution).
  The body is streamed and reading stops at ``max_bytes``; only HTML, XHTML and plain text are read (the type is
  checked from the headers before the body is downloaded); robots.txt is honoured per origin (RFC 9309: a 4xx
  robots.txt allows everything except 401/403, which forbid, as Python's robotparser does; an unreachable one or a
  5xx forbids); redirects are followed by hand (at most ``max_redirects``), each hop checked against robots.txt.
  Only public addresses are fetched unless ``allow_private`` (:mod:`searchrl.retrieval.netguard`): a result or a
  redirect that leads to this machine, the local network or a cloud metadata service is a ``private_address`` page.
  A page that fails in any of these ways comes back with a ``status`` saying why and no text.
- The header's charset decodes a page (an invalid byte becomes U+FFFD); without a known one, plain text is read as
  UTF-8 and HTML's encoding is left to BeautifulSoup (byte-order mark, ``<meta charset>``, a guess). HTML becomes
  text with BeautifulSoup (``html.parser``): scripts, styles, navigation, headers, footers and forms are dropped, the
  rest is joined line by line; the text is cut at ``max_chars``.
- :class:`PageSummarizer` wraps any :class:`~searchrl.generation.base.Generator` (a local model, or an
  OpenAI-compatible server such as a hosted GPT-4o-mini): ONE generate call condenses every page of a search batch
  for its query; a reply of "None" means the page has nothing relevant. The prompt is our own wording.
"""

from __future__ import annotations

import codecs
import math
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urljoin, urlsplit
from urllib.robotparser import RobotFileParser

import httpx

from searchrl import models
from searchrl.data.unitext import decoded_head
from searchrl.generation.base import Generator, SamplingParams
from searchrl.generation.openai_compat import OpenAICompatGenerator
from searchrl.generation.prompts import render_user_prompt as render_prompt
from searchrl.retrieval.cache import LRUCache
from searchrl.retrieval.netguard import PrivateAddress, public_client

if TYPE_CHECKING:
    from searchrl.config import WebConfig

#: content types whose pages are read (anything else is skipped before its body is downloaded)
TEXT_TYPES = ("text/html", "application/xhtml+xml", "text/plain")
_DROP_TAGS = ("script", "style", "noscript", "template", "svg", "nav", "header", "footer", "aside", "form", "iframe")
_BLOCK_TAGS = (
    "title",
    "p",
    "div",
    "br",
    "li",
    "dd",
    "dt",
    "tr",
    "td",
    "th",
    "pre",
    "blockquote",
    "section",
    "article",
    "main",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "table",
    "ul",
    "ol",
)
_REDIRECTS = (301, 302, 303, 307, 308)
_ROBOTS_MAX_BYTES = 500_000  # RFC 9309 asks crawlers to parse at least 500 KiB


@dataclass(frozen=True)
class FetchOptions:
    #: seconds for one page in all: robots.txt, redirects, headers and body
    timeout_s: float = 10.0
    #: body bytes read at most; the rest of a bigger page is not downloaded
    max_bytes: int = 2_000_000
    #: characters of extracted text kept (R1-Searcher's code keeps 35,000)
    max_chars: int = 35_000
    max_redirects: int = 5
    respect_robots: bool = True
    user_agent: str = "SearchRL-page-fetcher/0.1"
    #: fetch pages on private, loopback and link-local addresses too (an intranet search); off: public pages only
    allow_private: bool = False


@dataclass
class Page:
    """A fetched page: ``status`` is ``ok`` or why there is no text (robots, content_type, http_404, timeout,
    error, too_many_redirects, bad_url, private_address, empty)."""

    url: str
    status: str
    text: str = ""
    final_url: str = ""
    content_type: str = ""
    truncated: bool = False  # the body reached max_bytes or the text max_chars
    seconds: float = 0.0
    detail: str = field(default="", repr=False)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class _Deadline(Exception):
    pass


_BOMS = (codecs.BOM_UTF8, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


def _codec(charset: str | None) -> str | None:
    """Python's name of a declared charset (``utf-16`` for ``UTF-16``), or None when absent or unknown."""
    try:
        return codecs.lookup(charset).name if charset else None
    except LookupError:
        return None


def html_to_text(markup: bytes | str, encoding: str | None = None) -> str:
    """Visible text of an HTML page, one block per line (scripts, styles, navigation, headers, footers, forms out).

    >>> html_to_text(b"<html><head><style>p{}</style><title>T</title></head><body><nav>Menu</nav>"
    ...              b"<p>Hello <b>world</b>.</p><script>x()</script><div>Bye<br>now</div></body></html>")
    'T\\nHello world.\\nBye\\nnow'
    """
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(markup, "html.parser", from_encoding=encoding if isinstance(markup, bytes) else None)
    for tag in soup(list(_DROP_TAGS)):
        tag.decompose()
    for tag in soup(list(_BLOCK_TAGS)):  # block boundaries become line breaks; inline tags stay in their line
        tag.insert_before("\n")
        tag.insert_after("\n")
    lines = (" ".join(line.split()) for line in soup.get_text().splitlines())
    return "\n".join(line for line in lines if line)


class PageFetcher:
    """Fetch pages concurrently with timeouts, size caps, robots.txt and content-type checks (see the module doc)."""

    def __init__(self, options: FetchOptions = FetchOptions(), *, max_workers: int = 8, cache_size: int = 512):
        if options.timeout_s <= 0 or options.max_bytes < 1 or options.max_chars < 1:
            raise ValueError("page fetching needs timeout_s > 0, max_bytes >= 1 and max_chars >= 1")
        self.options = options
        timeout = httpx.Timeout(options.timeout_s)
        headers = {"User-Agent": options.user_agent, "Accept": "text/html,application/xhtml+xml,text/plain;q=0.9"}
        client = httpx.Client if options.allow_private else public_client
        self._client = client(timeout=timeout, headers=headers, follow_redirects=False)
        self.max_workers = max_workers
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="web-page")
        self._queued = 0  # pages of the fetch_many calls under way (from every thread)
        self._queued_lock = threading.Lock()
        self._robots: dict[str, RobotFileParser | bool] = {}
        self._robots_lock = threading.Lock()
        self.cache = LRUCache(cache_size)

    # ------------------------------------------------------------------------------------------------ robots
    def _robots_for(self, origin: str, deadline: float) -> RobotFileParser | bool:
        """The origin's parsed robots.txt, or True (allow all) / False (forbid all); cached per origin."""
        with self._robots_lock:
            if origin in self._robots:
                return self._robots[origin]
        rules: RobotFileParser | bool
        try:
            request = self._client.build_request("GET", f"{origin}/robots.txt", timeout=self._left(deadline))
            resp = self._client.send(request, stream=True, follow_redirects=True)
            try:
                status = resp.status_code
                body = self._read(resp, deadline, cap=_ROBOTS_MAX_BYTES)[0] if status < 300 else b""
            finally:
                resp.close()
        except (httpx.HTTPError, _Deadline):
            rules = False  # unreachable: assume complete disallow (RFC 9309 §2.3.1.4)
        else:
            if status in (401, 403):
                rules = False
            elif 400 <= status < 500:
                rules = True  # "unavailable": no rules
            elif status >= 300:
                rules = False
            else:
                parser = RobotFileParser()
                parser.parse(body.decode("utf-8", errors="replace").splitlines())
                rules = parser
        with self._robots_lock:
            self._robots[origin] = rules
        return rules

    def allowed(self, url: str, deadline: float | None = None) -> bool:
        """Whether robots.txt of the URL's origin lets our user agent fetch it."""
        if not self.options.respect_robots:
            return True
        parts = urlsplit(url)
        rules = self._robots_for(f"{parts.scheme}://{parts.netloc}", deadline or self._deadline())
        if isinstance(rules, bool):
            return rules
        return rules.can_fetch(self.options.user_agent, url)

    # ------------------------------------------------------------------------------------------------ fetching
    def _deadline(self) -> float:
        return time.monotonic() + self.options.timeout_s

    @staticmethod
    def _left(deadline: float) -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            raise _Deadline
        return left

    def fetch(self, url: str) -> Page:
        """One page; never raises for network or content problems (they become the page's ``status``)."""
        cached = self.cache.get(url)
        if cached is not None:
            return cached
        t0 = time.monotonic()
        deadline = t0 + self.options.timeout_s
        try:
            page = self._fetch(url, deadline)
        except _Deadline:
            page = Page(url, "timeout", detail=f"no complete page within {self.options.timeout_s} s")
        except httpx.TimeoutException as err:
            page = Page(url, "timeout", detail=type(err).__name__)
        except PrivateAddress as err:  # the page, a redirect or its robots.txt
            page = Page(url, "private_address", detail=str(err))
        except (httpx.HTTPError, UnicodeError, ValueError) as err:
            page = Page(url, "error", detail=f"{type(err).__name__}: {err}"[:200])
        page.seconds = time.monotonic() - t0
        if page.status not in ("timeout", "error"):  # transient failures are retried next time
            self.cache.put(url, page)
        return page

    def _fetch(self, url: str, deadline: float) -> Page:
        current = url
        for _ in range(self.options.max_redirects + 1):
            if urlsplit(current).scheme not in ("http", "https") or not urlsplit(current).netloc:
                return Page(url, "bad_url", final_url=current, detail="only http(s) URLs are fetched")
            if not self.allowed(current, deadline):
                return Page(url, "robots", final_url=current)
            request = self._client.build_request("GET", current, timeout=self._left(deadline))
            resp = self._client.send(request, stream=True)
            try:
                if resp.status_code in _REDIRECTS and "location" in resp.headers:
                    current = urljoin(current, resp.headers["location"])
                    continue
                if resp.status_code >= 400:
                    return Page(url, f"http_{resp.status_code}", final_url=current)
                ctype = resp.headers.get("content-type", "").split(";")[0].strip().lower()
                if ctype and ctype not in TEXT_TYPES:
                    return Page(url, "content_type", final_url=current, content_type=ctype)
                body, truncated = self._read(resp, deadline)
                encoding = _codec(resp.charset_encoding)  # None: not declared, or a codec Python does not know
                wide = encoding is not None and encoding.startswith(("utf-16", "utf-32"))  # NUL bytes are text there
                if b"\x00" in body[:4096] and not wide:  # binary content served without (or with a wrong) type
                    return Page(url, "content_type", final_url=current, content_type=ctype or "binary")
            finally:
                resp.close()
            if ctype == "text/plain":
                text = body.decode(encoding or "utf-8", errors="replace")
                text = "\n".join(" ".join(line.split()) for line in text.splitlines() if line.strip())
            elif encoding is not None and not body.startswith(_BOMS):
                # the declared charset, a bad byte replaced (BeautifulSoup would re-guess the whole page's encoding)
                text = html_to_text(body.decode(encoding, errors="replace"))
            else:
                text = html_to_text(body)  # BeautifulSoup reads a byte-order mark or <meta charset>
            if not text.strip():
                return Page(url, "empty", final_url=current, content_type=ctype)
            if len(text) > self.options.max_chars:
                text, truncated = text[: self.options.max_chars], True
            return Page(url, "ok", text, current, ctype, truncated)
        return Page(url, "too_many_redirects", final_url=current)

    def _read(self, resp: httpx.Response, deadline: float, cap: int | None = None) -> tuple[bytes, bool]:
        """The (decompressed) body up to ``cap`` bytes (default max_bytes), checking the page deadline after every
        chunk, so a trickling server stops and a compressed bomb is not inflated past the cap."""
        cap = cap or self.options.max_bytes
        chunks: list[bytes] = []
        size = 0
        for chunk in resp.iter_bytes():  # each network read as it arrives (a chunk_size would wait to fill it)
            self._left(deadline)
            chunks.append(chunk)
            size += len(chunk)
            if size >= cap:
                return b"".join(chunks)[:cap], True
        self._left(deadline)
        return b"".join(chunks), False

    def fetch_many(self, urls: Sequence[str]) -> list[Page]:
        """Pages of ``urls`` (same order), fetched ``max_workers`` at a time. Each page has its own deadline from when
        its fetch starts, so this returns within ``timeout_s`` per round of ``max_workers`` pages (counting the pages
        other threads have queued) plus one second, even if a worker is still blocked (e.g. in DNS resolution): a
        page not fetched by then is reported as ``timeout`` (one never started is not fetched later)."""
        unique = list(dict.fromkeys(urls))
        with self._queued_lock:
            self._queued += len(unique)
            rounds = math.ceil(self._queued / self.max_workers)
        try:
            futures = {u: self._pool.submit(self.fetch, u) for u in unique}
            wait(list(futures.values()), timeout=rounds * self.options.timeout_s + 1.0)
        finally:
            with self._queued_lock:
                self._queued -= len(unique)
        pages: dict[str, Page] = {}
        for u, fut in futures.items():
            if fut.cancel():
                pages[u] = Page(u, "timeout", detail="not started by the deadline: the workers were blocked")
            elif fut.done() and fut.exception() is None:
                pages[u] = fut.result()
            elif fut.done():
                pages[u] = Page(u, "error", detail=repr(fut.exception())[:200])
            else:
                pages[u] = Page(u, "timeout", detail="worker still blocked at the deadline")
        return [pages[u] for u in urls]

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._client.close()


SUMMARY_PROMPT = (
    'A search engine returned the web page below for the search query "{query}".\n\n'
    "Write one short paragraph that keeps only what the page says that is relevant to the query: names, dates, "
    "numbers and facts, in your own words. Use only the page, not your own knowledge. Write a summary, not just an "
    "answer. If nothing on the page is relevant to the query, reply with the single word None.\n\n"
    "Page:\n{page}\n\nSearch query: {query}"
)


class PageSummarizer:
    """Condense pages for their search queries with any generator: one generate call per batch of pages."""

    def __init__(
        self,
        generator: Generator,
        *,
        max_new_tokens: int = 256,
        max_page_tokens: int = 3000,
        prompt_style: str = "auto",
        temperature: float = 0.0,
    ) -> None:
        if max_new_tokens < 1 or max_page_tokens < 1:
            raise ValueError("the summariser needs max_new_tokens >= 1 and max_page_tokens >= 1")
        self.generator = generator
        self.tokenizer = generator.tokenizer
        self.max_new_tokens = max_new_tokens
        self.max_page_tokens = max_page_tokens
        self.prompt_style = prompt_style
        self.temperature = temperature
        self.cache = LRUCache(1024)

    def _prompt(self, query: str, page: str) -> list[int]:
        ids = list(self.tokenizer.encode(page, add_special_tokens=False))
        if len(ids) > self.max_page_tokens:  # keep the page's head, which holds its title and lead
            page = decoded_head(self.tokenizer, ids, self.max_page_tokens, page, skip_special_tokens=True) + " ..."
        text = render_prompt(
            self.tokenizer, SUMMARY_PROMPT.format(query=query, page=page), self.prompt_style, raw_cue="Summary:"
        )
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    @staticmethod
    def clean(reply: str) -> str | None:
        """The summary in a reply, or None when the model says the page is irrelevant.

        >>> PageSummarizer.clean("  None."), PageSummarizer.clean("Summary: Anna was born in Rome.\\n")
        (None, 'Anna was born in Rome.')
        """
        text = reply.strip()
        for label in ("summary:", "[extracted content]:", "extracted content:"):
            if text.lower().startswith(label):
                text = text[len(label) :].strip()
        if not text or text.strip(" .\"'*").lower() in ("none", "no relevant information"):
            return None
        return " ".join(text.split())

    def summarize(self, items: Sequence[tuple[str, str]]) -> list[str | None]:
        """``(query, page text)`` pairs -> one summary each (None: nothing relevant)."""
        out: list[str | None] = [None] * len(items)
        todo = []
        for i, key in enumerate(items):
            hit = self.cache.get(key)
            if hit is not None:
                out[i] = hit or None  # "" caches an irrelevant page
            else:
                todo.append(i)
        if todo:
            params = SamplingParams(max_new_tokens=self.max_new_tokens, temperature=self.temperature, seed=0)
            comps = self.generator.generate([self._prompt(*items[i]) for i in todo], params)
            for i, comp in zip(todo, comps, strict=True):
                out[i] = self.clean(comp.text)
                self.cache.put(items[i], out[i] or "")
        return out


def make_summarizer(cfg: WebConfig) -> PageSummarizer | None:
    """The summariser ``retrieval.web`` asks for: a local model run with transformers, or an OpenAI-compatible
    server (``summarizer_url``) with the ``summarizer`` model's tokenizer; None when no summariser is set."""
    if not cfg.summarizer:
        return None
    generator: Generator
    if cfg.summarizer_url:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(models.resolve_policy(cfg.summarizer))
        model = cfg.summarizer_served_model or cfg.summarizer
        generator = OpenAICompatGenerator(
            cfg.summarizer_url,
            model,
            tokenizer,
            timeout_s=cfg.summarizer_timeout_s,
            concurrency=cfg.summarizer_concurrency,
        )
    else:
        from searchrl.generation.hf import HFGenerator  # torch: only for a local summariser

        model, tokenizer = models.load_policy(cfg.summarizer, frozen=True)
        generator = HFGenerator(model, tokenizer)
    return PageSummarizer(
        generator, max_new_tokens=cfg.summary_max_new_tokens, max_page_tokens=cfg.summary_max_page_tokens
    )
