"""Data: QA datasets as :class:`QAExample` records (:func:`load_qa` reads FlashRAG, R1-Searcher, CSV, Parquet and
Hugging Face sources), corpora of passages, and the synthetic multi-hop worlds.

Names are imported on first use, so importing this package stays cheap.
"""

from __future__ import annotations

from searchrl._lazy import lazy_exports

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


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
