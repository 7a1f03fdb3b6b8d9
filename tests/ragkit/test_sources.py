"""A document's source: a file's path or `upload:<name>`, and nothing else knows the spelling."""

from __future__ import annotations

import pytest

from ragkit.sources import Source


@pytest.mark.parametrize(
    ("stored", "upload", "location", "file_name", "stem"),
    [
        ("/docs/guide.md", False, "/docs/guide.md", "guide.md", "guide"),
        ("upload:notes.txt", True, "notes.txt", "notes.txt", "notes"),
        ("upload:team/plan.v2.md", True, "team/plan.v2.md", "plan.v2.md", "plan.v2"),
        ("C:\\docs\\a.html", False, "C:\\docs\\a.html", "a.html", "C:\\docs\\a"),
        ("/srv/upload:odd.md", False, "/srv/upload:odd.md", "upload:odd.md", "upload:odd"),
    ],
)
def test_a_stored_source_parses_and_prints_back(
    stored: str, upload: bool, location: str, file_name: str, stem: str
) -> None:
    source = Source.parse(stored)
    assert (source.is_upload, source.location) == (upload, location)
    assert str(source) == stored
    assert source.file_name == file_name
    assert source.stem == stem


def test_an_upload_is_stored_with_its_prefix() -> None:
    assert str(Source.upload("a.md")) == "upload:a.md"
    assert Source.parse(str(Source.upload("a.md"))) == Source.upload("a.md")
