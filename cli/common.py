"""What every command shares: the consoles, settings, error exits, tenant checks, the Temporal
connection, the database sessions and links to the Temporal UI."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from temporalio.exceptions import ApplicationError

from ragkit.settings import Settings
from schemas.common import Contract, DocumentFilter, TenantId

if TYPE_CHECKING:
    from durable_rag.client import RagClient

console = Console()
err = Console(stderr=True)


def load_settings() -> Settings:
    try:
        return with_stack_tracing(Settings())
    except ValidationError as exc:
        usage_error(f"invalid settings:\n{exc}")
    except ValueError as exc:  # a retired setting (ragkit.settings.RETIRED)
        usage_error(f"invalid settings: {exc}")


def with_stack_tracing(settings: Settings) -> Settings:
    """While an embedded stack brought up with `--tracing` runs (it leaves `run/tracing.json`
    until `down`), commands trace into its viewer too, unless tracing is set otherwise."""
    marker = settings.data_dir / "run" / "tracing.json"
    if "enabled" in settings.tracing.model_fields_set:  # the environment or .env said
        return settings
    try:
        traced = json.loads(marker.read_text())
    except (OSError, ValueError):
        return settings
    return settings.model_copy(
        update={
            "tracing_enabled": True,
            "tracing_endpoint": traced["endpoint"],
            "tracing_viewer_url": traced["viewer_url"],
        }
    )


# Messages quote what the user typed: escaped, or `delete "[/x]"` is a Rich MarkupError.
def usage_error(message: str) -> NoReturn:
    err.print(f"[red]error:[/red] {escape(message)}")
    raise typer.Exit(2)


def fail(message: str) -> NoReturn:
    err.print(f"[red]error:[/red] {escape(message)}")
    raise typer.Exit(1)


def print_degradations(notes: Iterable[str]) -> None:
    for note in notes:
        console.print(f"  [yellow]degraded[/yellow] {escape(note)}")


def cited(title: str, heading_path: str, location: str) -> str:
    """`Title › Section > Sub · slide 3`: what a person follows to a passage. The heading path
    often starts with the title: it is shown once."""
    path = (
        heading_path
        if heading_path and heading_path.startswith(title)
        else " › ".join(part for part in (title, heading_path) if part)
    )
    return f"{path} · {location}" if location else path


def exists(path: Path, folder: bool = False) -> bool:
    """Path.exists (or is_dir), but no for a name the OS refuses (too long, no access): those
    raise OSError, which was a traceback for `ingest` of a 9000-character path."""
    try:
        return path.is_dir() if folder else path.exists()
    except OSError:
        return False


class _Tenant(Contract):
    tenant: TenantId


def check_tenant(tenant: str | None) -> None:
    """Refuse a malformed tenant before connecting to anything (empty: the default one)."""
    if tenant:
        require_tenant(tenant)


def require_tenant(tenant: str) -> None:
    """Refuse a malformed tenant, the empty one included."""
    try:
        _Tenant(tenant=tenant)
    except ValidationError as exc:
        usage_error(first_error(exc))


def ui_link(settings: Settings, workflow_id: str) -> str:
    return f"{settings.temporal.ui_url}/namespaces/{settings.temporal.namespace}/workflows/{workflow_id}"


def first_error(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(x) for x in first["loc"])
    return f"{where}: {first['msg']}"


# The options every command that searches takes (search, ask): the documents it may read.
CreatedAfter = Annotated[
    str | None,
    typer.Option(
        help="Only documents first ingested at or after this time (ISO 8601; UTC if no zone)."
    ),
]
CreatedBefore = Annotated[
    str | None, typer.Option(help="Only documents first ingested at or before this time.")
]
UpdatedAfter = Annotated[
    str | None,
    typer.Option(help="Only documents whose current version came at or after this time."),
]
UpdatedBefore = Annotated[
    str | None,
    typer.Option(help="Only documents whose current version came at or before this time."),
]
Meta = Annotated[
    list[str] | None,
    typer.Option("--meta", help="KEY=VALUE; repeat it. Searches: every pair must match."),
]


def parse_meta(pairs: list[str] | None) -> dict[str, str]:
    """`--meta k=v` options as a dict; a malformed one exits 2."""
    found: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep:
            usage_error(f"--meta {pair!r}: expected KEY=VALUE")
        if key in found:
            usage_error(f"--meta: key {key!r} given twice")
        found[key] = value
    return found


def document_filter(
    created_after: str | None,
    created_before: str | None,
    updated_after: str | None,
    updated_before: str | None,
    meta: list[str] | None,
) -> DocumentFilter:
    """The search options as a DocumentFilter: a time with no zone is UTC, a date is its
    midnight UTC; anything malformed exits 2 with the reason."""
    times: dict[str, datetime | None] = {}
    for name, value in (
        ("created_after", created_after),
        ("created_before", created_before),
        ("updated_after", updated_after),
        ("updated_before", updated_before),
    ):
        if value is None:
            times[name] = None
            continue
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            usage_error(f"--{name.replace('_', '-')} {value!r}: not an ISO 8601 date or time")
        times[name] = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    try:
        return DocumentFilter.model_validate({**times, "metadata": parse_meta(meta)})
    except ValidationError as exc:
        usage_error(first_error(exc))


def root_cause(exc: BaseException) -> str:
    """The innermost failure of a workflow error, as `Type: message`."""
    from durable_rag.client import failure_cause  # lazy: temporalio's client and the workflows

    cause = failure_cause(exc)
    if isinstance(cause, ApplicationError):
        return f"{cause.type}: {cause.message}"
    return str(cause)


async def connect(settings: Settings) -> RagClient:
    from durable_rag.client import RagClient  # lazy: temporalio's client and the workflows
    from ragkit import tracing

    # With tracing on, the workflows a command starts join its trace (ragkit/tracing.py); what
    # is buffered is exported when the command exits.
    tracing.setup(settings, "cli")
    try:
        return await RagClient.connect(settings)
    except RuntimeError as exc:
        fail(
            f"cannot reach Temporal at {settings.temporal.address} ({exc}); "
            "is the stack up? run `durable-rag up`"
        )


def db_sessions(settings: Settings) -> Any:
    from ragkit.db import make_sessionmaker  # lazy: SQLAlchemy, 0.2 s

    return make_sessionmaker(settings.postgres.sqlalchemy_url)
