"""Office files are zip archives of XML: checked before any library opens one.

- Zip bombs: the archive's members may unpack to at most `MAX_UNPACKED_BYTES` in all, and a member
  over `RATIO_GRACE_BYTES` may not be compressed more than `MAX_RATIO` to 1 (a bomb is 1,000 to 1
  or more; Office parts, 5 to 30). A member's declared size bounds what reading it yields
  (zipfile stops there and checks the CRC), so the declared sizes are what the check reads.
- XML entities: Office Open XML never declares a DTD, so a part that does (the billion laughs,
  an external entity reaching for a file or a URL) is refused before an XML parser sees it.
"""

from __future__ import annotations

import io
import re
import zipfile

from ragkit.parsing.model import ENCRYPTED, PARSE_ERROR, TOO_LARGE, DocumentError

MAX_UNPACKED_BYTES = 1024 * 1024 * 1024
MAX_RATIO = 100
RATIO_GRACE_BYTES = 1024 * 1024
MAX_MEMBERS = 20_000
# A DTD must come before the root element: the prolog is read up to there (and no further than
# this: a longer prolog is itself refused).
MAX_PROLOG_BYTES = 64 * 1024
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_ROOT = re.compile(r"<[A-Za-z_]")


def _prolog_declares_dtd(head: bytes) -> bool | None:
    """True if a DTD is declared before the root element; None if no root starts in `head`."""
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        text = head.decode("utf-16", "replace")
    else:
        text = head.decode("utf-8", "replace")
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    root = _ROOT.search(text)
    prolog = text[: root.start()] if root else text
    if "<!DOCTYPE" in prolog or "<!ENTITY" in prolog:
        return True
    return False if root else None


def open_office_zip(data: bytes, label: str, suffix: str) -> zipfile.ZipFile:
    """The archive, once it passed the checks above; `label` names the format in messages."""
    if data.startswith(_OLE_MAGIC):
        raise DocumentError(
            ENCRYPTED,
            f"not an Open XML {label}: a password-protected file, or an old binary one renamed "
            f"{suffix} (save it as {suffix} without a password)",
        )
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        members = archive.infolist()
    except Exception as exc:  # BadZipFile, NotImplementedError, struct and zlib errors
        raise DocumentError(PARSE_ERROR, f"not a {label} (not a zip archive: {exc})") from None
    if len(members) > MAX_MEMBERS:
        raise DocumentError(PARSE_ERROR, f"a zip archive of over {MAX_MEMBERS} members")
    unpacked = sum(m.file_size for m in members)
    if unpacked > MAX_UNPACKED_BYTES:
        raise DocumentError(
            TOO_LARGE,
            f"unpacks to {unpacked} bytes, over the limit of {MAX_UNPACKED_BYTES} (a zip bomb?)",
        )
    for member in members:
        if member.flag_bits & 0x1:
            raise DocumentError(ENCRYPTED, f"the zip member {member.filename!r} is encrypted")
        if member.file_size > RATIO_GRACE_BYTES and (
            member.file_size > MAX_RATIO * max(member.compress_size, 1)
        ):
            raise DocumentError(
                PARSE_ERROR,
                f"the zip member {member.filename!r} is compressed "
                f"{member.file_size // max(member.compress_size, 1)} to 1, over the limit of "
                f"{MAX_RATIO} to 1 (a zip bomb?)",
            )
    for member in members:
        if not member.filename.lower().endswith((".xml", ".rels", ".vml")):
            continue
        try:
            with archive.open(member) as part:
                head = part.read(MAX_PROLOG_BYTES)
        except Exception as exc:  # a damaged member: BadZipFile, zlib.error, EOFError...
            raise DocumentError(
                PARSE_ERROR, f"the zip member {member.filename!r} is damaged: {exc}"
            ) from None
        declares = _prolog_declares_dtd(head)
        if declares or (declares is None and len(head) == MAX_PROLOG_BYTES):
            raise DocumentError(
                PARSE_ERROR,
                f"the XML part {member.filename!r} declares a DTD or entities, which Office "
                "files never do (an entity expansion or external entity attack?)",
            )
    return archive
