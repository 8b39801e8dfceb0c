"""Data: QA datasets as :class:`QAExample` records (:func:`load_qa` reads FlashRAG, R1-Searcher, CSV, Parquet and
Hugging Face sources), corpora of passages, and the synthetic multi-hop worlds.

Names are imported on first use, so importing this package stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

#: name -> the module that defines it (this package's, or a layer below it)
_EXPORTS = {
    "QAExample": "searchrl.data.records",
    "as_examples": "searchrl.data.records",
    "load_qa": "searchrl.data.loaders",
    "iter_qa": "searchrl.data.loaders",
    "Passage": "searchrl.data.corpus",
    "iter_passages": "searchrl.data.corpus",
    "write_corpus": "searchrl.data.corpus",
    "generate_world": "searchrl.data.synth",
    "write_world": "searchrl.data.synth",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'searchrl.data' has no attribute {name!r}")


def __dir__() -> list[str]:  # tab completion: the exports and submodules, not this file's own imports
    return sorted({*globals(), *_EXPORTS} - {"annotations", "importlib", "Any"})
