"""Protocols on text outside plain ASCII English: queries, multi-query separators and the CJK format rule."""

from __future__ import annotations

import pytest

from searchrl.protocols import get_protocol
from searchrl.protocols.base import Search


@pytest.mark.parametrize(
    ("content", "queries"),
    [
        (" 北京，上海 , Zürich ", ("北京", "上海", "Zürich")),  # the full-width comma of Chinese text
        (" 東京、大阪の人口 ", ("東京、大阪の人口",)),  # the ideographic comma joins words inside one phrase
        (' ["東京", "Москва"] ', ("東京", "Москва")),
    ],
)
def test_rag_r1_multi_query_separators(content: str, queries: tuple[str, ...]) -> None:
    p = get_protocol("rag_r1", multi_query=True)
    assert p.parse(f"<search>{content}</search>") == Search(queries)
    with pytest.raises(ValueError, match="cannot contain one"):
        p.format_search(["北京，上海"])


def test_non_ascii_queries_keep_their_text_and_lose_invisible_characters() -> None:
    p = get_protocol("search_r1")
    assert p.parse("<search> Zür\u200bich 東京🎉 \ud800Москва </search>") == Search(("Zürich 東京🎉 Москва",))
    assert p.parse("＜search＞東京＜/search＞").reason == "no_action"  # full-width tags are not the protocol's


@pytest.mark.parametrize("name", ["r1_searcher", "r1_searcher_pp"])
def test_cjk_in_the_policys_text_can_be_allowed(name: str) -> None:
    response = (
        "北京是首都。</think>\n\n<answer> 北京 </answer>" if name == "r1_searcher" else "北京是首都。\\boxed{北京}"
    )
    assert any("CJK" in m for m in get_protocol(name).check_format(response).problems)
    assert get_protocol(name, cjk_garbled=False).check_format(response).ok
