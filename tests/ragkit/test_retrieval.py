from ragkit.retrieval import (
    Scored,
    assemble_context,
    build_prompt,
    fuse,
    keyword_query,
    normalize_question,
    parse_citations,
)


def words(text: str) -> int:
    return len(text.split())


def test_zscore_fusion_rewards_agreement_and_keeps_single_side_items() -> None:
    dense = [Scored("a", 0.9), Scored("b", 0.8), Scored("c", 0.1)]
    keyword = [Scored("b", 5.0), Scored("d", 1.0)]
    fused = [s.key for s in fuse(dense, keyword, "zscore", 0.7, 0.3)]
    assert fused[0] == "b"  # high on both sides beats high on one
    assert set(fused) == {"a", "b", "c", "d"}


def test_weights_decide_between_disagreeing_retrievers() -> None:
    dense = [Scored("a", 0.9), Scored("b", 0.1)]
    keyword = [Scored("b", 9.0), Scored("a", 1.0)]
    assert fuse(dense, keyword, "zscore", 0.9, 0.1)[0].key == "a"
    assert fuse(dense, keyword, "zscore", 0.1, 0.9)[0].key == "b"


# "Which lexer do I get when I ask Pygments for jade?" (evals/sets/lexers): 'jade' is an alias of
# the pug lexer. Its 20 dense and 20 BM25 candidates, as the packaged MiniLM and the index scored
# them.
JADE_DENSE = [
    ("phix", 0.4563), ("lily_pond", 0.449), ("django", 0.4439), ("maxima", 0.4218),
    ("smarty", 0.4114), ("mason", 0.4053), ("monte", 0.4007), ("redcode", 0.3999), ("erb", 0.3996),
    ("cheetah", 0.394), ("fancy", 0.3908), ("befunge", 0.39), ("pug", 0.39), ("mako", 0.3899),
    ("stan", 0.3863), ("myghty", 0.3819), ("cryptol", 0.381), ("macaulay2", 0.3768),
    ("sh_ex_c", 0.3733), ("genshi", 0.3716),
]  # fmt: skip
JADE_BM25 = [
    ("pug", 11.145), ("maxima", 10.027), ("idl", 9.726), ("bugs", 9.627), ("igor", 9.531),
    ("phix", 9.343), ("stan", 8.583), ("rd", 8.431), ("makefile", 8.357), ("fancy", 8.284),
    ("w_diff", 7.416), ("lua", 3.823), ("pan", 3.014), ("my_sql", 3.002), ("twig", 2.96),
    ("idris", 2.943), ("sql", 2.926), ("handlebars", 2.926), ("smarty", 2.908),
    ("lily_pond", 2.908),
]  # fmt: skip


def test_a_dense_side_without_a_clear_preference_casts_a_weak_vote() -> None:
    """The dense cosines lie within 0.09 of each other; BM25 has a clear winner on the alias.
    Divided by their own spread (0.02), the dense differences outvote BM25; divided by at
    least 0.1, they stay the small preference they are."""
    dense = [Scored(k, v) for k, v in JADE_DENSE]
    keyword = [Scored(k, v) for k, v in JADE_BM25]
    assert fuse(dense, keyword, "zscore", 0.4, 0.6)[0].key == "phix"
    assert fuse(dense, keyword, "zscore", 0.4, 0.6, dense_min_spread=0.1)[0].key == "pug"
    # A dense side that does spread out keeps its own z-scores: the floor changes nothing.
    spread = [Scored("a", 0.9), Scored("b", 0.5), Scored("c", 0.1)]
    assert fuse(spread, keyword, "zscore", 0.4, 0.6, dense_min_spread=0.1) == fuse(
        spread, keyword, "zscore", 0.4, 0.6
    )


def test_rrf_and_one_sided_inputs() -> None:
    assert [s.key for s in fuse([Scored("a", 1)], [], "rrf")] == ["a"]
    assert [s.key for s in fuse([], [Scored("k", 3), Scored("j", 1)], "zscore")] == ["k", "j"]
    assert fuse([], [], "zscore") == []


def test_dbsf_normalises_each_side_by_its_spread_as_qdrant_does() -> None:
    """Distribution-based score fusion: each side mapped to [0, 1] between mean - 3 sd and
    mean + 3 sd, then summed; the same ranking Qdrant's DBSF gives (tests/ragkit/index)."""
    dense = [Scored("a", 0.9), Scored("b", 0.8), Scored("c", 0.1)]
    keyword = [Scored("b", 5.0), Scored("d", 1.0)]
    fused = fuse(dense, keyword, "dbsf", 1.0, 1.0)
    assert [s.key for s in fused][:1] == ["b"]  # on both sides
    assert all(0 <= s.score <= 2 for s in fused) and {s.key for s in fused} == {"a", "b", "c", "d"}
    # One score on a side (no spread) counts as the middle of the range.
    assert fuse([Scored("x", 3.0)], [], "dbsf", 1.0, 1.0) == [Scored("x", 0.5)]


def test_fusion_order_is_deterministic_on_ties() -> None:
    dense = [Scored("b", 1.0), Scored("a", 1.0)]
    assert [s.key for s in fuse(dense, [], "zscore")] == ["a", "b"]


def test_context_drops_lowest_scores_first_and_never_cuts_mid_sentence() -> None:
    passages = [
        ("low", "one two three four five.", 0.1),
        ("high", "alpha beta gamma. delta epsilon zeta.", 0.9),
        ("mid", "red green blue yellow.", 0.5),
    ]
    kept, dropped = assemble_context(passages, 10, words)
    assert [k for k, _ in kept] == ["high", "mid"]
    assert dropped == 1
    kept, _ = assemble_context(passages, 4, words)
    assert kept == [("high", "alpha beta gamma.")]  # cut at a sentence end
    kept, dropped = assemble_context([("x", "one two three four five six.", 1.0)], 3, words)
    assert kept == [] and dropped == 1


def test_citations_from_markers_only_point_into_the_context() -> None:
    context = [("c1", "Paris is the capital."), ("c2", "Berlin is in Germany.")]
    keys, method = parse_citations("Paris [1], see also [2] and [7].", context)
    assert keys == ["c1", "c2"] and method == "markers"


def test_citations_fall_back_to_word_overlap() -> None:
    context = [
        ("c1", "Ken Thompson and Rob Pike designed UTF-8 in 1992."),
        ("c2", "Tea is a drink."),
    ]
    keys, method = parse_citations("UTF-8 was designed by Ken Thompson and Rob Pike.", context)
    assert keys == ["c1"] and method == "overlap"
    assert parse_citations("I don't know.", context) == ([], "none")


def test_prompt_numbers_passages_and_keyword_query_ors_words() -> None:
    prompt = build_prompt("Who?", [("a", "first"), ("b", "second")])
    assert "[1] first" in prompt and "[2] second" in prompt and prompt.endswith("Answer:")
    assert keyword_query("Who designed UTF-8?") == "who or designed or utf or 8"
    assert normalize_question("  Who DESIGNED utf-8?? ") == "who designed utf 8"


def test_an_llm_rewrite_is_cleaned_and_unusable_ones_fall_back_to_the_question() -> None:
    from ragkit.retrieval import clean_rewrite

    question = "Could you tell me who designed UTF-8?"
    assert clean_rewrite('  "UTF-8 designer"\nextra words', question) == "UTF-8 designer"
    assert clean_rewrite("Search query: UTF-8 design", question) == "UTF-8 design"
    assert clean_rewrite("\n\n", question) == question
    assert clean_rewrite("x" * 500, question) == question
