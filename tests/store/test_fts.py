from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes_actors.store import FtsResult, NewMessage, Role, Store, StoreInterface

MESSAGES = [
    (Role.USER, "How do I deploy the docker image to kubernetes?"),
    (Role.ASSISTANT, "Build the image, push it, then apply the deployment manifest with kubectl."),
    (Role.USER, "Python is nicer than Java for this script."),
    (Role.ASSISTANT, "我们来讨论中文分词和全文搜索的问题。"),
    (Role.USER, "今日は良い天気ですね、散歩に行きましょう。"),
    (Role.ASSISTANT, "한국어 텍스트도 검색할 수 있어야 합니다."),
    (Role.TOOL, "docker: image pushed to registry.example/app:latest"),
    (Role.USER, "用Python写一个爬虫"),
]


@pytest.fixture
def corpus(store: StoreInterface) -> dict[str, int]:
    session = store.create_session("cli")
    ids = store.append_messages(session.id, [NewMessage(role=r, content=c) for r, c in MESSAGES])
    return {c: i for (_, c), i in zip(MESSAGES, ids, strict=True)}


def found(result: FtsResult) -> set[str]:
    assert result.ok, result.error
    return {h.snippet.replace(">>>", "").replace("<<<", "") for h in result.hits}


def ids(result: FtsResult) -> set[int]:
    assert result.ok, result.error
    return {h.message_id for h in result.hits}


def test_an_english_word_matches_case_insensitively(store: StoreInterface, corpus: dict[str, int]) -> None:
    assert ids(store.fts_query("Kubernetes")) == {corpus[MESSAGES[0][1]]}


def test_words_are_anded_by_default(store: StoreInterface, corpus: dict[str, int]) -> None:
    assert ids(store.fts_query("docker image")) == {corpus[MESSAGES[0][1]], corpus[MESSAGES[6][1]]}
    assert ids(store.fts_query("docker kubectl")) == set()


def test_a_phrase_matches_only_adjacent_words(store: StoreInterface, corpus: dict[str, int]) -> None:
    assert ids(store.fts_query('"the docker image"')) == {corpus[MESSAGES[0][1]]}
    assert ids(store.fts_query('"image docker"')) == set()


def test_a_prefix_query_matches_word_starts(store: StoreInterface, corpus: dict[str, int]) -> None:
    assert ids(store.fts_query("deploy*")) == {corpus[MESSAGES[0][1]], corpus[MESSAGES[1][1]]}


def test_boolean_operators_work(store: StoreInterface, corpus: dict[str, int]) -> None:
    assert ids(store.fts_query("kubectl OR java")) == {corpus[MESSAGES[1][1]], corpus[MESSAGES[2][1]]}
    assert ids(store.fts_query("docker NOT kubernetes")) == {corpus[MESSAGES[6][1]]}
    assert ids(store.fts_query("(docker OR python) AND image")) == {
        corpus[MESSAGES[0][1]],
        corpus[MESSAGES[6][1]],
    }


def test_a_one_character_chinese_query_finds_its_message(store: StoreInterface, corpus: dict[str, int]) -> None:
    result = store.fts_query("搜")
    assert result.index == "words"
    assert ids(result) == {corpus[MESSAGES[3][1]]}
    assert ">>>搜<<<" in result.hits[0].snippet


def test_a_two_character_chinese_query_matches_adjacent_characters_only(
    store: StoreInterface, corpus: dict[str, int]
) -> None:
    assert ids(store.fts_query("分词")) == {corpus[MESSAGES[3][1]]}
    assert ids(store.fts_query("词分")) == set()
    assert ">>>分词<<<" in store.fts_query("分词").hits[0].snippet


def test_a_four_character_chinese_query_uses_the_trigram_index(store: StoreInterface, corpus: dict[str, int]) -> None:
    result = store.fts_query("全文搜索")
    assert result.index == "trigram"
    assert ids(result) == {corpus[MESSAGES[3][1]]}
    assert ">>>全文搜索<<<" in result.hits[0].snippet
    assert ids(store.fts_query("搜索全文")) == set()


def test_japanese_korean_and_mixed_script_queries_match(store: StoreInterface, corpus: dict[str, int]) -> None:
    assert ids(store.fts_query("天気")) == {corpus[MESSAGES[4][1]]}
    assert ids(store.fts_query("검색")) == {corpus[MESSAGES[5][1]]}
    assert ids(store.fts_query("python")) == {corpus[MESSAGES[2][1]], corpus[MESSAGES[7][1]]}
    assert ids(store.fts_query("爬虫 python")) == {corpus[MESSAGES[7][1]]}


def test_short_cjk_queries_are_answered_from_the_index_not_a_scan(sqlite_store: Store, corpus: dict[str, int]) -> None:
    plan = " ".join(
        str(row[-1])
        for row in sqlite_store._connection.execute(
            "EXPLAIN QUERY PLAN SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?", ("分词",)
        )
    )
    assert "VIRTUAL TABLE INDEX" in plan
    assert "messages" not in plan.replace("messages_fts", "")


def test_roles_and_session_filter_the_hits(store: StoreInterface, corpus: dict[str, int]) -> None:
    assert ids(store.fts_query("docker", roles=["tool"])) == {corpus[MESSAGES[6][1]]}
    other = store.create_session("cli")
    store.append_messages(other.id, [NewMessage(role=Role.USER, content="docker again")])
    assert len(store.fts_query("docker").hits) == 3
    assert [h.session_id for h in store.fts_query("docker", session_id=other.id).hits] == [other.id]


def test_newest_and_oldest_order_by_message_id(store: StoreInterface, corpus: dict[str, int]) -> None:
    newest = [h.message_id for h in store.fts_query("docker", order="newest").hits]
    assert newest == sorted(newest, reverse=True)
    oldest = [h.message_id for h in store.fts_query("docker", order="oldest").hits]
    assert oldest == sorted(oldest)


MALFORMED = [
    '"unbalanced quote',
    'two "quotes" and "one',
    "(unclosed",
    "closed)",
    "((nested)",
    ":",
    "foo:",
    ":bar",
    "nosuchcolumn:docker",
    "^",
    "^^docker",
    "AND",
    "OR",
    "NOT",
    "docker AND",
    "OR docker",
    "docker NOT",
    "*",
    "docker**",
    "+",
    "c++",
    "-docker",
    "NEAR(",
    "NEAR(docker",
    "{docker",
    "docker}",
    "x" * 5000,
    "docker \x00 image",
    "\x00",
    "",
    "   ",
    "???",
    "docker;DROP TABLE messages",
    "'",
    "\\",
]


@pytest.mark.slow
@pytest.mark.parametrize("query", MALFORMED, ids=lambda q: repr(q[:20]))
def test_a_malformed_query_never_raises_and_never_answers_wrongly(
    store: StoreInterface, corpus: dict[str, int], query: str
) -> None:
    result = store.fts_query(query)
    if result.ok:
        # Accepted as valid syntax: then every hit must contain a searched word (no silent reinterpretation).
        assert result.hits == [] or all(">>>" in h.snippet for h in result.hits)
    else:
        assert result.hits == []
        assert result.error
        assert "quote" in result.error or "limit" in result.error or "empty" in result.error or "NUL" in result.error
    assert store.stats().messages == len(MESSAGES)


def test_the_suggestion_of_a_refused_query_is_a_literal_search_that_runs(
    store: StoreInterface, corpus: dict[str, int]
) -> None:
    refused = store.fts_query("c++ docker:")
    assert not refused.ok
    assert refused.suggestion == '"c++" "docker:"'
    assert store.fts_query(refused.suggestion).ok


def test_the_length_limit_is_named_in_the_error(store: StoreInterface) -> None:
    result = store.fts_query("word " * 1000)
    assert result.error is not None
    assert "5000 characters long; the limit is 1000" in result.error


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(query=st.text(alphabet=st.sampled_from(list("ab中文 \"()*:^+-{}NOTANDOR\x00\\'")), max_size=40))
def test_no_query_made_of_fts_syntax_characters_raises(store: StoreInterface, query: str) -> None:
    result = store.fts_query(query)
    assert result.ok or result.error


def test_long_cjk_and_newest_queries_are_answered_from_the_indexes(sqlite_store: Store, corpus: dict[str, int]) -> None:
    def plan(sql: str, *params: object) -> str:
        return " | ".join(str(row[-1]) for row in sqlite_store._connection.execute("EXPLAIN QUERY PLAN " + sql, params))

    trigram = plan(
        "SELECT m.id FROM messages_fts_cjk f JOIN messages m ON m.id = f.rowid "
        "WHERE f.content LIKE ? ORDER BY f.rowid DESC LIMIT 10",
        "%全文搜索%",
    )
    assert "VIRTUAL TABLE INDEX" in trigram
    assert "SEARCH m USING INTEGER PRIMARY KEY" in trigram
    assert "SCAN m" not in trigram
    newest = plan(
        "SELECT m.id FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid "
        "WHERE messages_fts MATCH ? ORDER BY messages_fts.rowid DESC LIMIT 10",
        "docker",
    )
    assert "TEMP B-TREE" not in newest  # no sort of every match before the LIMIT


def test_a_long_message_is_cut_to_sixteen_tokens_around_its_match(store: StoreInterface) -> None:
    words = [f"w{i}" for i in range(30)]
    words[20] = "target"
    chinese = "今天天气很好我们去公园散步然后回家吃饭再看一会儿书人在这里等你很久了大家都很高兴明天见"
    session = store.create_session("cli")
    store.append_messages(session.id, [NewMessage(role=Role.USER, content=t) for t in (" ".join(words), chinese)])
    assert [h.snippet for h in store.fts_query("target").hits] == [
        "…w13 w14 w15 w16 w17 w18 w19 >>>target<<< w21 w22 w23 w24 w25 w26 w27 w28…"
    ]
    assert [h.snippet for h in store.fts_query("人在").hits] == ["…饭再看一会儿书>>>人在<<<这里等你很久了…"]


def test_a_message_with_a_word_too_long_for_a_lexeme_is_stored_and_found_by_its_other_words(
    store: StoreInterface,
) -> None:
    """PostgreSQL refuses a tsvector lexeme over 2046 bytes: such a word is left out of the index (the message once
    failed to commit, and its turn was tried again forever). Its place still counts, so the words around it are not
    adjacent."""
    session = store.create_session("cli")
    blob = "q" * 3000
    (message_id,) = store.append_messages(session.id, [NewMessage(role=Role.USER, content=f"before {blob} after")])
    assert ids(store.fts_query("before")) == {message_id}
    assert ids(store.fts_query("after")) == {message_id}
    assert ids(store.fts_query('"before after"')) == set()
