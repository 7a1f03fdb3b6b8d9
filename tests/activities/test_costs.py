"""Cost rows against real Postgres, and `durable-rag costs top` (R26)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from activities import costs
from activities.costs import CostActivities
from durable_rag.cli import app
from schemas.answer import AnswerCost, RecordCostInput, StepCost
from tests.conftest import Database

pytestmark = pytest.mark.integration


def answer_cost(trace: str, tenant: str, model: str, seconds: float) -> RecordCostInput:
    return RecordCostInput(
        trace_id=trace,
        tenant=tenant,
        model=model,
        route="primary",
        total_ms=seconds * 1000 + 40,
        cost=AnswerCost(
            engine_seconds=seconds,
            embed_seconds=0.01,
            steps=[
                StepCost(step="embed_query", model="embedding", seconds=0.01),
                StepCost(
                    step="generate",
                    model=model,
                    seconds=seconds,
                    prompt_tokens=500,
                    completion_tokens=int(seconds * 10),
                ),
            ],
        ),
    )


def test_costs_are_one_row_per_answer_and_top_sorts_by_engine_seconds(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    activities = CostActivities(database.sessions)
    for trace, tenant, model, seconds in [
        ("answer-a", "acme", "small", 0.5),
        ("answer-b", "acme", "large", 4.0),
        ("answer-c", "zeta", "small", 2.0),
    ]:
        activities.record_cost(answer_cost(trace, tenant, model, seconds))
    activities.record_cost(answer_cost("answer-a", "acme", "small", 0.5))  # a retry
    assert database.scalar("SELECT count(*) FROM answer_costs") == 3

    since = costs.since_days(1)
    with database.sessions() as session:
        assert [r.trace_id for r in costs.top(session, 2, since)] == ["answer-b", "answer-c"]
        per_model = costs.totals(session, "model", since)
        per_tenant = costs.totals(session, "tenant", since)
        per_day = costs.totals(session, "day", since)
    assert [(t.key, t.answers, t.engine_seconds) for t in per_model] == [
        ("large", 1, 4.0),
        ("small", 2, 2.5),
    ]
    assert [(t.key, t.prompt_tokens) for t in per_tenant] == [("acme", 1000), ("zeta", 500)]
    assert len(per_day) == 1 and per_day[0].answers == 3

    monkeypatch.setenv("DURABLE_RAG_DATABASE_URL", database.url)
    result = CliRunner().invoke(app, ["costs", "top", "-n", "2"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines.index(next(x for x in lines if "answer-b" in x)) < lines.index(
        next(x for x in lines if "answer-c" in x)
    )
    assert "answer-a" not in result.output.split("Per model")[0]
    assert "Per model" in result.output and "Per tenant" in result.output
