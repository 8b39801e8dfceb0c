"""Data: QA datasets as :class:`QAExample` records (:func:`load_qa` reads FlashRAG, R1-Searcher, CSV, Parquet and
Hugging Face sources), corpora of passages, and the synthetic multi-hop worlds.

Names are imported on first use, so importing this package stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from searchrl._lazy import lazy_exports

if TYPE_CHECKING:  # what type checkers and editors see (they do not run __getattr__)
    from searchrl.data.corpus import Passage as Passage
    from searchrl.data.corpus import iter_passages as iter_passages
    from searchrl.data.corpus import write_corpus as write_corpus
    from searchrl.data.loaders import iter_qa as iter_qa
    from searchrl.data.loaders import load_qa as load_qa
    from searchrl.data.records import QAExample as QAExample
    from searchrl.data.records import as_examples as as_examples
    from searchrl.data.synth import generate_world as generate_world
    from searchrl.data.synth import write_world as write_world

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
