"""The `tenants` group: deleting a tenant whole."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from cli.common import connect, console, fail, load_settings, require_tenant, ui_link, usage_error

tenants_app = typer.Typer(help="Tenants: delete one whole.", no_args_is_help=True)


@tenants_app.command("delete")
def tenants_delete(
    tenant: Annotated[str, typer.Argument(help="The tenant to delete.")],
    yes: Annotated[
        bool, typer.Option("--yes", help="Confirm: this cannot be undone.", show_default=False)
    ] = False,
) -> None:
    """Delete a tenant whole: its API keys, documents, index points, conversations, answer
    records and every Temporal run that carried its text. Prints what was removed."""
    # lazy: temporalio's client and the workflows, 0.4 s at import.
    from temporalio.client import WorkflowFailureError

    from durable_rag.client import failure_cause

    settings = load_settings()
    require_tenant(tenant)
    if not yes:
        usage_error(f"this deletes everything of tenant {tenant!r} for good; add --yes to do it")

    async def run() -> None:
        rag = await connect(settings)
        try:
            done = await rag.delete_tenant(tenant)
        except WorkflowFailureError as exc:
            fail(f"the deletion failed (run it again to finish it): {failure_cause(exc)}")
        console.print(
            f"tenant {done.tenant} deleted: {done.documents} document(s), "
            f"{done.keys_revoked} key(s) revoked, {done.runs_deleted} Temporal run(s) deleted"
        )
        for table, count in done.rows_removed.items():
            if count:
                console.print(f"  {table}: {count} row(s)")
        console.print(f"run: {ui_link(settings, done.workflow_id)}")

    asyncio.run(run())
