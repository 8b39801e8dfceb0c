"""Schema fuzzing: schemathesis generates requests from the service's own OpenAPI schema (valid and invalid bodies,
odd strings, boundary numbers) against BM25, dense and hybrid servers. Not one may get a 5xx.

The dense and hybrid servers use the torch-free hashing encoder, so the test stays fast; the same handler code
serves a real encoder (``test_onnx_encoder`` covers that path).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup

from searchrl.data.corpus import PassageStore, iter_passages
from searchrl.retrieval.dense import DenseOptions, DenseRetriever, read_faiss_index
from searchrl.retrieval.hybrid import HybridRetriever
from searchrl.retrieval.index import build_index, load_index
from searchrl.retrieval.server import create_app

MAX_EXAMPLES = 60  # per operation and retriever: a few seconds each


@pytest.fixture(scope="module", params=["bm25", "dense", "hybrid"])
def fuzz_app(request, tiny_corpus: Path, tiny_bm25: Path, make_hashing_encoder, tmp_path_factory):
    if request.param == "bm25":
        retriever = load_index(tiny_bm25)
    else:
        encoder = make_hashing_encoder()
        vecs = encoder.encode([p.contents for p in iter_passages(tiny_corpus)], is_query=False)
        out = build_index(tiny_corpus, "dense", tmp_path_factory.mktemp("fuzz") / "dense", vectors=vecs)
        index = read_faiss_index(out / "dense" / "index.faiss", DenseOptions())
        retriever = DenseRetriever(index, PassageStore(out / "passages"), encoder)
        if request.param == "hybrid":
            retriever = HybridRetriever(load_index(tiny_bm25), retriever, candidates=5)
    return create_app(retriever, max_queries=16, max_query_chars=500, max_topk=20)


def _fuzz(operation, mode: GenerationMode) -> list[int]:
    """Run schemathesis cases for one operation; every response must be below 500. Returns the status codes.

    Derandomised: the same cases on every run (hypothesis seeds from the test itself), so a pass or a failure does
    not depend on the luck of the draw.
    """
    statuses: list[int] = []

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,
    )
    def fuzz(case) -> None:
        response = case.call()
        statuses.append(response.status_code)
        case.validate_response(response, checks=[not_a_server_error])
        assert response.status_code < 500, f"{case.method} {case.path} {case.body!r} -> {response.status_code}"

    fuzz()
    return statuses


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_server_errors_from_schema_fuzzing(fuzz_app, mode: GenerationMode) -> None:
    schema = schemathesis.openapi.from_asgi("/openapi.json", fuzz_app)
    seen: dict[str, list[int]] = {}
    for result in schema.get_all_operations():
        operation = result.ok()
        if mode is GenerationMode.NEGATIVE and not len(operation.body):
            continue  # nothing to make invalid in GET /health or GET /stats
        seen[operation.label] = _fuzz(operation, mode)
    assert len(seen.get("POST /retrieve", [])) >= 10, seen
    if mode is GenerationMode.POSITIVE:  # schema-valid bodies are mostly answered, not all rejected
        assert 200 in seen["POST /retrieve"]
        assert seen["GET /health"] and set(seen["GET /health"]) == {200}
    else:  # invalid bodies are rejected (a few are coerced, e.g. "topk": "5", and answered: pydantic's lax mode)
        rejected = sum(400 <= code < 500 for code in seen["POST /retrieve"])
        assert rejected >= 0.8 * len(seen["POST /retrieve"]), seen["POST /retrieve"]


def test_fuzzing_finds_a_planted_server_error(tiny_bm25: Path) -> None:
    """The check above can fail: a retriever that crashes on valid inputs is caught.

    The planted bug is hit by any request with a non-blank query, most of the cases drawn. (A bug hit only by
    ``topk >= 4`` was missed by some draws: how often an optional field is sent, and its values, vary with the seed
    and with what else the session imported.)
    """
    bm25 = load_index(tiny_bm25)

    class Fragile:
        def search(self, queries: list[str], k: int):
            if any(q.strip() for q in queries):
                raise RuntimeError("planted bug")
            return bm25.search(queries, k)

    schema = schemathesis.openapi.from_asgi("/openapi.json", create_app(Fragile(), max_topk=20))
    operation = schema.find_operation_by_label("POST /retrieve")
    with pytest.raises(FailureGroup, match="Server error"):
        _fuzz(operation, GenerationMode.POSITIVE)
