"""Versioned prompt templates: one TOML file per version, named by its id (`answer-v1.toml`).

The client loads the configured template into the answer's plan, so the workflow builds the
prompt from exactly that text (and replays deterministically), and the answer names its id and
the hash of the file's bytes (R16): any answer traces back to the exact prompt.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from functools import cache
from pathlib import Path

from schemas.answer import PromptTemplate

FOLDER = Path(__file__).resolve().parent
TEMPLATE_ID = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")
REQUIRED = frozenset({"passages", "question"})
ALLOWED = REQUIRED | {"history"}


def available() -> list[str]:
    return sorted(p.stem for p in FOLDER.glob("*.toml"))


@cache
def load(template_id: str) -> PromptTemplate:
    """The template `template_id`, checked; ValueError names what is wrong."""
    if not TEMPLATE_ID.match(template_id):
        raise ValueError(f"prompt template id {template_id!r} is not a valid name")
    path = FOLDER / f"{template_id}.toml"
    if not path.is_file():
        raise ValueError(f"no prompt template {template_id!r}; available: {', '.join(available())}")
    raw = path.read_bytes()
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"prompt template {path.name} is not valid TOML: {exc}") from exc
    if data.get("id") != template_id:
        raise ValueError(f"{path.name} says id = {data.get('id')!r}; it must be {template_id!r}")
    for key in ("system", "user"):
        if not isinstance(data.get(key), str) or not data[key].strip():
            raise ValueError(f"{path.name} needs a non-empty {key!r} text")
    used = set(PLACEHOLDER.findall(data["user"]))
    if missing := REQUIRED - used:
        raise ValueError(f"{path.name}: `user` lacks {', '.join(sorted(missing))}")
    if unknown := used - ALLOWED:
        raise ValueError(f"{path.name}: unknown placeholder(s) {', '.join(sorted(unknown))}")
    return PromptTemplate(
        id=template_id,
        hash=hashlib.sha256(raw).hexdigest()[:16],
        system=data["system"],
        user=data["user"],
    )
