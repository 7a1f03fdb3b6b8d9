"""`durable-rag`: the command line. Bad input exits with code 2 and a message."""

from __future__ import annotations

import os
import sys

import typer

from cli import answers, documents, index, keys, models, reports, stack, tenants

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)

# Registered here, not by a decorator in each module: this order is the order `--help` lists.
app.command()(stack.up)
app.command()(stack.down)
app.command()(stack.status)
app.command()(stack.worker)
app.command()(stack.migrate)
app.command()(stack.deploy)
app.command()(documents.ingest)
app.command()(documents.search)
app.command()(answers.ask)
app.command()(answers.chat)
app.command()(documents.delete)
app.command()(index.compact)
app.command()(index.rebuild)
app.command("feedback")(answers.feedback_cmd)
app.command("eval")(reports.eval_cmd)
app.command()(answers.history)
app.command()(stack.gateway)
app.add_typer(reports.costs_app, name="costs")
app.add_typer(reports.shadow_app, name="shadow")
app.add_typer(models.models_app, name="models")
app.add_typer(index.schedules_app, name="schedules")
app.add_typer(keys.keys_app, name="keys")
app.add_typer(tenants.tenants_app, name="tenants")


def main() -> None:
    code: int | str | None = 0
    try:
        app()
    except KeyboardInterrupt:
        code = 130
    except SystemExit as exc:
        code = exc.code
    # Leave without interpreter finalization: native threads of the Temporal and gRPC runtimes
    # can still be releasing the GIL then, which aborts the process (SIGABRT, "PyGILState_Release
    # ... finalizing") after the command has already succeeded. Nothing here needs atexit.
    if isinstance(code, str):
        print(code, file=sys.stderr)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)
