"""The ``retrieval`` section, and the settings of the retrieval kinds that are services or models, its subsections:
``web`` (a search API and its pages), ``simulated`` (a model writes the documents) and ``mcp`` (an MCP server's
search tool)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from searchrl.config.base import Section
from searchrl.config.extensions import known, registered


class WebConfig(Section):
    """Online search (``retrieval.kind: web``): a search API, the result pages, an optional summariser model.

    The papers that evaluate online (R1-Searcher, R1-Searcher++, RAG-R1) fetch the result pages and summarise each
    with GPT-4o-mini; page count, truncation and prompt are not stated. See ``searchrl.retrieval.pages``.
    """

    #: serpapi or google; auto = google when $GOOGLE_API_KEY is set and $SERPAPI_API_KEY is not, else serpapi.
    provider: Literal["auto", "serpapi", "google"] = "auto"
    #: appended to every query, e.g. " site:en.wikipedia.org" (R1-Searcher's online evaluation code).
    query_suffix: str = ""
    #: fetch the result pages; their text (or its summary) replaces the search API's snippets.
    fetch_pages: bool = True
    #: results per query whose page is fetched (null = all top-k); the others keep their snippet.
    pages: int | None = Field(default=None, ge=1)
    #: seconds for one page in all (robots.txt, redirects, body).
    page_timeout_s: float = Field(default=10.0, gt=0)
    #: bytes of a page body read at most.
    max_page_bytes: int = Field(default=2_000_000, ge=1)
    #: characters of page text kept (R1-Searcher's code: 35,000).
    max_page_chars: int = Field(default=35_000, ge=1)
    respect_robots: bool = True
    user_agent: str = "SearchRL-page-fetcher/0.1"
    #: also fetch pages on private, loopback and link-local addresses (an intranet search engine); off, a result
    #: or redirect leading to this machine, the local network or a cloud metadata service is refused.
    allow_private: bool = False
    #: summariser model spec (alias, local dir, HF id; with summarizer_url, its tokenizer); null = no summariser.
    summarizer: str | None = None
    #: OpenAI-compatible endpoint serving the summariser (e.g. http://127.0.0.1:8001/v1); null = run it locally.
    summarizer_url: str | None = None
    #: model name on summarizer_url (null = summarizer).
    summarizer_served_model: str | None = None
    #: seconds one summary request to summarizer_url may take (the whole answer), and requests sent at once.
    summarizer_timeout_s: float = Field(default=120.0, gt=0)
    summarizer_concurrency: int = Field(default=8, ge=1)
    summary_max_new_tokens: int = Field(default=256, ge=1)
    #: page tokens shown to the summariser at most (the head of the page).
    summary_max_page_tokens: int = Field(default=3000, ge=1)


class SimulatedConfig(Section):
    """Simulated search (``retrieval.kind: simulated``): a language model writes each query's documents, as ZeroSearch
    (Sun et al., 2025) trains a policy with no search engine. Only training rollouts use it; evaluation, data stages
    and ``searchrl ask`` search a real index of ``data.corpus`` (``eval_kind``). Not one of the five papers' methods;
    every default is ours [O].
    """

    #: the writer model (alias, local dir, HF id; with ``url``, its tokenizer).
    model: str = "smollm2-135m-instruct"
    #: OpenAI-compatible endpoint serving the writer (e.g. http://127.0.0.1:8001/v1); null = run it locally.
    url: str | None = None
    served_model: str | None = None
    #: with ``url``: seconds one document request may take (the whole answer), and requests sent at once (one
    #: document each; a rollout batch asks for topk documents per query).
    timeout_s: float = Field(default=120.0, gt=0)
    concurrency: int = Field(default=8, ge=1)
    max_new_tokens: int = Field(default=96, ge=1)
    temperature: float = Field(default=0.7, ge=0.0)
    #: share of deliberately unhelpful documents at the first and the last training step; in between ZeroSearch's
    #: curriculum, p = start + (base^(i/m) - 1) / (base - 1) * (end - start) at step i of m.
    noise_start: float = Field(default=0.0, ge=0.0, le=1.0)
    noise_end: float = Field(default=0.5, ge=0.0, le=1.0)
    noise_base: float = Field(default=10.0, gt=1.0)
    #: the real index kind that evaluation and the other stages search instead.
    eval_kind: Literal["bm25", "dense", "hybrid"] = "bm25"
    seed: int = 0


class MCPConfig(Section):
    """Search through an MCP (Model Context Protocol) server (``retrieval.kind: mcp``): each query is one call of
    the server's search tool, whose text result becomes the query's documents (a JSON list of hits, or plain text as
    one document). The call's timeout is ``retrieval.timeout_s``. See ``searchrl.retrieval.mcp``; ``searchrl mcp
    serve`` exposes our own indexes this way. Not one of the five papers' methods; every default is ours [O].
    """

    #: the server: a command line started as a subprocess (stdio transport), e.g. "searchrl mcp serve --index
    #: indexes/bm25" (or its arguments as a list), or a streamable-HTTP URL, e.g. http://127.0.0.1:8001/mcp.
    server: str | list[str] | None = None
    #: the server's tool that searches.
    tool: str = Field(default="search", min_length=1)
    #: the tool argument that receives the query; null = from the tool's input schema: ``queries`` (an array, sent
    #: one query per call) or ``query`` (a string), else its only string (or string-array) argument.
    query_arg: str | None = None
    #: the tool argument that receives retrieval.topk; null = ``topk``, ``top_k``, ``k``, ``num_results`` or
    #: ``max_results`` when the schema has one (without one, the tool's own hits are cut to retrieval.topk).
    topk_arg: str | None = None
    #: seconds to start a command's server and finish the MCP handshake (the server loads its index meanwhile).
    connect_timeout_s: float = Field(default=60.0, gt=0)
    #: tool calls in flight at once (a search batch fans out one call per query).
    concurrency: int = Field(default=16, ge=1)
    #: environment variables for a command's server, beyond the few it inherits (PATH, HOME, USER, SHELL, ...).
    env: dict[str, str] = Field(default_factory=dict)

    @field_validator("server")
    @classmethod
    def _server(cls, v: str | list[str] | None) -> str | list[str] | None:
        if v is not None and not (v.strip() if isinstance(v, str) else v and str(v[0]).strip()):
            raise ValueError(
                "retrieval.mcp.server is empty; give a command line (e.g. 'searchrl mcp serve --index "
                "indexes/bm25') or a URL (e.g. http://127.0.0.1:8001/mcp), or null"
            )
        return v


class RetrievalConfig(Section):
    #: bm25, dense, hybrid (local indexes), remote, web, simulated, mcp, or a kind a plugin registered.
    kind: Annotated[str, AfterValidator(known("retriever"))] = "bm25"
    #: index directory for local kinds; built on demand when missing.
    index: str | None = None
    #: one or more endpoints for ``kind: remote``.
    urls: list[str] = Field(default_factory=list)
    topk: int = Field(default=3, ge=1)
    encoder: str = "minilm-l6-v2"
    #: dense / hybrid indexes built on demand: exact inner product (flat), ivf, hnsw, or a faiss index_factory
    #: string such as "IVF1024,PQ96" (a compressed index re-ranked exactly; see searchrl.retrieval.compressed).
    faiss: str = Field(default="flat", pattern=r"^(flat|ivf|hnsw|[A-Za-z0-9_,.=()\-]*[A-Z][A-Za-z0-9_,.=()\-]*)$")
    timeout_s: float = Field(default=10.0, gt=0)
    #: ``kind: remote``: attempts after a failed request (a connection error, a 5xx, a timeout), waiting ``backoff_s``
    #: doubled each time; a long run against a shared server may wait out a restart: retries 8, backoff_s 1 is ~4 min.
    retries: int = Field(default=3, ge=0)
    backoff_s: float = Field(default=0.2, ge=0)
    #: ``kind: web`` only: the search API, page fetching and the summariser.
    web: WebConfig = WebConfig()
    #: ``kind: simulated`` only: the writer model and its noise curriculum.
    simulated: SimulatedConfig = SimulatedConfig()
    #: ``kind: mcp`` only: the MCP server, its search tool and how the query reaches it.
    mcp: MCPConfig = MCPConfig()
    #: a plugin's retriever kind only: the settings its factory reads (searchrl.retrieval.register_retriever).
    options: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check_mcp(self) -> RetrievalConfig:
        if self.kind == "mcp" and self.mcp.server is None:
            raise ValueError(
                "retrieval.kind=mcp needs retrieval.mcp.server: a command line (e.g. 'searchrl mcp serve --index "
                "indexes/bm25') or a streamable-HTTP URL (e.g. http://127.0.0.1:8001/mcp)"
            )
        if self.options and self.kind not in registered("retriever"):
            raise ValueError(
                f"retrieval.options configures a plugin's retriever; retrieval.kind={self.kind} takes none: remove it"
            )
        return self
