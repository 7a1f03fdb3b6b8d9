"""HTML through lxml: what a reader reads, by block, under its headings; tables by row with their
headers; the site's navigation and chrome left out."""

from ragkit import parsing
from tests.ragkit.parsing.test_formats import blocks_text


def parse(html: str | bytes) -> parsing.ParsedDocument:
    return parsing.parse(html.encode() if isinstance(html, str) else html, "html", "fallback")


def test_scripts_are_skipped_and_headings_kept() -> None:
    doc = parse(
        "<html><head><title>Doc T</title><style>p{}</style></head><body>"
        "<h1>Top</h1><p>Hello <b>bold</b> world.</p><script>evil()</script>"
        "<h2>Sub</h2><p>Second&nbsp;para.</p></body></html>"
    )
    assert doc.title == "Doc T"
    assert blocks_text(doc) == [(("Top",), "Hello bold world."), (("Top", "Sub"), "Second para.")]
    assert "evil" not in doc.text


def test_inline_elements_join_their_neighbours_as_a_browser_shows_them() -> None:
    doc = parse("<p>L<span>A</span>T<sub>E</sub>X is a<em>mazing</em>.<br>Next line</p>")
    assert [doc.text[b.start : b.end] for b in doc.blocks] == ["LATEX is amazing.", "Next line"]


def test_a_table_is_one_block_per_row_with_its_headers() -> None:
    doc = parse(
        "<h2>Capitals</h2><table><caption>Europe</caption>"
        "<thead><tr><th>Country</th><th>Capital</th><th>Population</th></tr></thead>"
        "<tbody><tr><td>France</td><td>Paris</td><td>2.1 M</td></tr>"
        "<tr><th>Spain</th><td>Madrid</td><td></td></tr></tbody></table>"
    )
    assert blocks_text(doc) == [
        (("Capitals",), "Europe"),
        (("Capitals",), "Country | Capital | Population"),
        (("Capitals",), "Country: France | Capital: Paris | Population: 2.1 M"),
        (("Capitals",), "Country: Spain | Capital: Madrid"),
    ]


def test_a_header_cell_spanning_columns_names_each_of_them() -> None:
    doc = parse(
        "<table><tr><th>Name</th><th colspan=2>Phone</th></tr>"
        "<tr><td>Ann</td><td>home 1</td><td>work 2</td></tr></table>"
    )
    assert doc.text.endswith("Name: Ann | Phone: home 1 | Phone: work 2")


def test_a_table_without_headers_gives_its_cells_in_order() -> None:
    doc = parse("<table><tr><td>alpha</td><td>beta</td></tr><tr><td>gamma</td></tr></table>")
    assert [doc.text[b.start : b.end] for b in doc.blocks] == ["alpha | beta", "gamma"]


def test_a_layout_table_is_read_as_the_page_it_lays_out() -> None:
    doc = parse(
        "<table><tr><td><h1>Site</h1><p>Welcome text.</p></td><td><h2>News</h2>"
        "<p>Item one.</p></td></tr></table>"
    )
    assert blocks_text(doc) == [(("Site",), "Welcome text."), (("Site", "News"), "Item one.")]


def test_navigation_and_site_chrome_stay_out_but_an_articles_own_parts_stay_in() -> None:
    doc = parse(
        "<body><header>Site logo Home About</header><nav><a>Home</a><a>Blog</a></nav>"
        '<div role="navigation">Breadcrumbs</div><aside>Ads here</aside>'
        "<main><article><header>By A. Writer</header><h1>Herons</h1><p>Herons nest in trees.</p>"
        "<aside>Fun fact: herons are patient.</aside><footer>Filed under birds</footer>"
        '</article></main><div hidden>secret</div><p aria-hidden="true">icon</p>'
        "<footer>Copyright 2026</footer></body>"
    )
    said = " ".join(doc.text[b.start : b.end] for b in doc.blocks)
    for gone in ("Site logo", "Blog", "Breadcrumbs", "Ads here", "secret", "icon", "Copyright"):
        assert gone not in said
    for kept in ("By A. Writer", "Herons nest in trees.", "herons are patient", "Filed under"):
        assert kept in said


def test_preformatted_text_keeps_its_lines() -> None:
    doc = parse("<h1>Code</h1><pre>def f():\n    return 1\n</pre>")
    assert blocks_text(doc) == [(("Code",), "def f():\n    return 1")]


def test_permalink_anchors_stay_out_of_headings() -> None:
    doc = parse('<h1>Install<a class="headerlink" href="#install">¶</a></h1><p>Run it.</p>')
    assert doc.blocks[0].heading_path == ("Install",)


def test_a_page_in_a_declared_legacy_encoding_is_read_in_it() -> None:
    page = '<html><head><meta charset="iso-8859-1"></head><body><p>Café crème</p></body></html>'
    doc = parse(page.encode("latin-1"))
    assert doc.text == "Café crème"


def test_a_page_that_is_not_utf8_and_declares_nothing_is_refused() -> None:
    try:
        parse("<p>Café</p>".encode("latin-1"))
    except parsing.DocumentError as exc:
        assert exc.kind == parsing.INVALID_UTF8
    else:
        raise AssertionError("parsed")
