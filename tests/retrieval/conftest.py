"""Fixtures for retrieval tests: a tiny hand-written corpus, its BM25 index, and uvicorn servers in threads."""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import numpy as np
import pytest

from searchrl.retrieval.dense import DenseOptions

#: (title, text): distinct topics so the right passage for each query is unambiguous.
TINY_PASSAGES = [
    ("Alan Turing", "Alan Turing was an English mathematician who formalised computation with the Turing machine."),
    ("Ada Lovelace", "Ada Lovelace wrote the first published algorithm for Babbage's Analytical Engine."),
    ("Python (programming language)", "Python is a programming language created by Guido van Rossum in 1991."),
    ("Mount Everest", "Mount Everest is the highest mountain above sea level, on the border of Nepal and China."),
    ("Amazon River", "The Amazon river in South America carries more water than any other river."),
    ("Photosynthesis", "Photosynthesis lets plants turn sunlight, water and carbon dioxide into sugar and oxygen."),
    ("Marie Curie", "Marie Curie studied radioactivity and won Nobel prizes in physics and chemistry."),
    ("Great Wall of China", "The Great Wall of China is a series of fortifications built across northern China."),
    ("Jazz", "Jazz is a music genre that began in New Orleans, with swing, blue notes and improvisation."),
    ("Honey bee", "Honey bees live in colonies, make honey from nectar and pollinate flowering plants."),
    ("Volcano", "A volcano is a rupture in a planet's crust where lava, ash and gases escape."),
    ("Chess", "Chess is a board game for two players on a checkered board of sixty-four squares."),
]


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Search-R1 corpus layout: ``{"id", "contents": '"Title"\\ntext'}`` (quoted title, as in its example corpus)."""
    path = tmp_path_factory.mktemp("tiny") / "corpus.jsonl"
    rows = [{"id": str(i), "contents": f'"{t}"\n{x}'} for i, (t, x) in enumerate(TINY_PASSAGES)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="session")
def tiny_bm25(tiny_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from searchrl.retrieval.index import build_index

    return build_index(tiny_corpus, "bm25", tmp_path_factory.mktemp("idx") / "bm25")


class HashingEncoder:
    """A torch-free stand-in for ``Encoder``: hashed bag of words, L2-normalised (queries and passages alike)."""

    def __init__(self, dimension: int = 64) -> None:
        self.dimension = dimension
        self.options = DenseOptions(encoder="hashing-test")
        self.calls: list[int] = []

    def embed(self, text: str) -> np.ndarray:
        v = np.zeros(self.dimension, dtype=np.float32)
        for word in text.lower().replace("\n", " ").split():
            word = word.strip(".,'\"()")
            if len(word) > 2:
                v[int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dimension] += 1.0
        return v / max(float(np.linalg.norm(v)), 1e-9)

    def encode(self, texts, *, is_query: bool, batch_size: int = 64) -> np.ndarray:
        self.calls.append(len(texts))
        return np.stack([self.embed(t) for t in texts]).astype(np.float32)  # (N, D)


@pytest.fixture
def hashing_encoder() -> HashingEncoder:
    return HashingEncoder()


@pytest.fixture(scope="session")
def make_hashing_encoder() -> Callable[[], HashingEncoder]:
    """For module- or session-scoped fixtures, which cannot use ``hashing_encoder``."""
    return HashingEncoder


@contextmanager
def _serve(app) -> Iterator[str]:
    """Run ``app`` with uvicorn on a free loopback port in a daemon thread; yields the base URL."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))  # bound before the thread starts, so the port cannot be taken meanwhile
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.time() + 20
    while not server.started:
        if time.time() > deadline or not thread.is_alive():
            raise RuntimeError("test server did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@pytest.fixture
def serve_app() -> Callable[[object], AbstractContextManager[str]]:
    """``with serve_app(app) as url: ...`` runs a FastAPI app on 127.0.0.1 for the block."""
    return _serve


def free_port() -> int:
    """A loopback port with nothing listening (for unreachable-endpoint tests)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def unused_port() -> int:
    return free_port()


@pytest.fixture
def dead_url(unused_port: int) -> str:
    return f"http://127.0.0.1:{unused_port}"
