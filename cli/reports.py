"""Reports on answers: what they cost (`costs top`), how a shadow candidate compares
(`shadow report`), and how well they score on a case set (`eval`)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from cli.common import (
    check_tenant,
    connect,
    console,
    db_sessions,
    err,
    exists,
    fail,
    load_settings,
    ui_link,
    usage_error,
)
from evals import answers
from schemas.evaluation import EvalReport

BUNDLED_CORPUS = Path(__file__).resolve().parent.parent / "corpus"

costs_app = typer.Typer(help="What answers cost: engine seconds and tokens (R26).")


@costs_app.command("top")
def costs_top(
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, max=1_000)] = 10,
    days: Annotated[float, typer.Option(min=0.01, max=3_650, help="How far back.")] = 7,
) -> None:
    """The most expensive answers, then totals per model, per tenant and per day."""
    from ragkit.store import costs, feedback  # lazy: SQLAlchemy, 0.2 s

    settings = load_settings()
    sessions = db_sessions(settings)
    since = costs.since_days(days)
    with sessions() as session:
        rows = costs.top(session, limit, since)
        totals = {by: costs.totals(session, by, since) for by in ("model", "tenant", "day")}
        votes = feedback.tally(session, since)
    console.print(f"[bold]Most expensive answers, last {days:g} day(s)[/bold]")
    console.print(f"{'engine s':>9} {'tokens in':>9} {'out':>6} {'tenant':<12} {'model':<24} trace")
    for row in rows:
        console.print(
            f"{row.engine_seconds:>9.3f} {row.prompt_tokens:>9} {row.completion_tokens:>6} "
            f"{row.tenant:<12} {row.model:<24} {row.trace_id}"
        )
    console.print(
        f"\nfeedback: {votes.up} up, {votes.down} down"
        + (f" ({votes.approval:.0%} approval)" if votes.approval is not None else "")
    )
    for by, found in totals.items():
        console.print(f"\n[bold]Per {by}[/bold]")
        console.print(f"{by:<24} {'answers':>8} {'engine s':>10} {'tokens in':>10} {'out':>8}")
        for total in found:
            console.print(
                f"{total.key:<24} {total.answers:>8} {total.engine_seconds:>10.3f} "
                f"{total.prompt_tokens:>10} {total.completion_tokens:>8}"
            )


shadow_app = typer.Typer(
    help="Shadow mode: a candidate configuration on sampled live requests (R28).",
    no_args_is_help=True,
)


@shadow_app.command("report")
def shadow_report(
    days: Annotated[float, typer.Option(min=0.01, max=3_650, help="How far back.")] = 7,
    tenant: Annotated[
        str | None, typer.Option(help="Only this tenant's requests; default: every tenant.")
    ] = None,
) -> None:
    """Candidate against live: agreement, citation overlap, latency and cost per answer."""
    check_tenant(tenant)
    from ragkit.store import costs  # lazy: SQLAlchemy, 0.2 s

    settings = load_settings()
    with db_sessions(settings)() as session:
        report = costs.shadow_report(session, costs.since_days(days), tenant)
    if not report:
        console.print(
            f"no shadow runs in the last {days:g} day(s): set DURABLE_RAG_SHADOW_SAMPLE_RATE "
            "and DURABLE_RAG_SHADOW_MODEL (or _SHADOW_PROMPT)"
        )
        return
    console.print(
        f"{'candidate':<36} {'pairs':>6} {'agree':>6} {'similar':>8} {'cites':>6} "
        f"{'p50 ms live/cand':>18} {'engine s live/cand':>20}"
    )
    for row in report:
        console.print(
            f"{row.candidate:<36} {row.pairs:>6} {row.agreement:>6.0%} "
            f"{row.answer_similarity:>8.2f} {row.citation_overlap:>6.2f} "
            f"{row.live_p50_ms:>8.0f} / {row.candidate_p50_ms:<7.0f} "
            f"{row.live_engine_seconds:>9.3f} / {row.candidate_engine_seconds:<8.3f}"
        )


def eval_cmd(
    set_name: Annotated[
        str, typer.Argument(help="A set in evals/sets: answers-gate (the gate), answers-smoke.")
    ],
    gate: Annotated[
        bool, typer.Option(help="Exit 1 when a metric drops beyond its baseline's tolerance.")
    ] = False,
    save_baseline: Annotated[
        bool, typer.Option(help="Store this run's metrics as the set's baseline.")
    ] = False,
    tenant: Annotated[str, typer.Option(help="Tenant the corpus is ingested as.")] = "eval",
    corpus: Annotated[
        Path, typer.Option(help="Documents the set's cases are about.")
    ] = BUNDLED_CORPUS,
    concurrency: Annotated[int, typer.Option(min=1, max=64)] = 4,
) -> None:
    """Evaluate the answer flow on a case set (R25): retrieval recall@k, MRR, nDCG@10, citation
    precision, fact coverage, refusal accuracy, latency. The report goes to Postgres and to a
    Markdown file under the data directory."""
    try:
        cases = answers.load_set(set_name)
        baseline = answers.load_baseline(set_name) if gate else None
    except ValueError as exc:
        usage_error(str(exc))
    if not exists(corpus, folder=True):
        usage_error(f"no corpus folder {corpus}")
    check_tenant(tenant)
    settings = load_settings()

    async def run() -> EvalReport:
        rag = await connect(settings)
        ingested = await rag.ingest([str(corpus)], tenant=tenant)
        if ingested.failures:
            fail(f"{len(ingested.failures)} corpus document(s) failed to ingest")
        return await rag.evaluate(set_name, cases, tenant, concurrency)

    report = asyncio.run(run())
    regressions = answers.compare(report.metrics, baseline) if baseline else None
    path = settings.data_dir / "evals" / f"{report.workflow_id}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(answers.markdown(report, regressions))
    for name, value in report.metrics.model_dump().items():
        console.print(f"{name:<20} {value}")
    console.print(f"report: {path}  (run {ui_link(settings, report.workflow_id)})")
    if save_baseline:
        console.print(f"baseline saved: {answers.save_baseline(set_name, report, cases)}")
    if regressions:
        for regression in regressions:
            err.print(f"[red]gate:[/red] {regression}")
        raise typer.Exit(1)
    if regressions is not None:
        console.print("gate: pass")
