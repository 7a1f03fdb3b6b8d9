"""Cost rows against real Postgres, and `durable-rag costs top` (R26)."""

from __future__ import annotations

import uuid

import pytest
from typer.testing import CliRunner, Result

from activities.costs import REDACTED_REPLY, CostActivities
from cli import app
from ragkit import ids
from ragkit.db import Conversation, Summary, Turn
from ragkit.store import costs, feedback
from schemas.answer import AnswerCost, ChatMessage, RecordCostInput, RecordShadowInput, StepCost
from schemas.documents import DocumentRef
from schemas.maintenance import CompactionInput
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


def test_feedback_from_the_cli_is_one_vote_per_answer_and_bad_votes_exit_2(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    CostActivities(database.sessions).record_cost(answer_cost("answer-f", "acme", "small", 1.0))
    monkeypatch.setenv("DURABLE_RAG_DATABASE_URL", database.url)
    cli = CliRunner()

    def vote(*args: str) -> Result:
        return cli.invoke(app, ["feedback", *args, "--tenant", "acme"])

    assert vote("answer-f", "up").exit_code == 0
    replaced = vote("answer-f", "down", "--comment", "cited the wrong page")
    assert replaced.exit_code == 0 and "replaced" in replaced.output
    for args, message in [
        (("answer-f", "meh"), "rating must be 'up' or 'down'"),
        (("answer-unknown", "up"), "no answer with trace id"),
    ]:
        refused = vote(*args)
        assert refused.exit_code == 2 and message in refused.output, refused.output
    other_tenant = cli.invoke(app, ["feedback", "answer-f", "up", "--tenant", "zeta"])
    assert other_tenant.exit_code == 2
    assert database.rows("SELECT rating, comment FROM feedback") == [
        ("down", "cited the wrong page")
    ]
    with database.sessions() as session:
        assert feedback.tally(session, costs.since_days(1)) == feedback.Tally(up=0, down=1)
    assert "1 down" in cli.invoke(app, ["costs", "top"]).output


def test_transcripts_are_kept_with_the_cost_row_and_purged_after_their_retention(
    database: Database,
) -> None:
    activities = CostActivities(database.sessions)
    for trace in ("answer-old", "answer-new"):
        request = answer_cost(trace, "acme", "small", 1.0).model_copy(
            update={
                "messages": [ChatMessage(role="user", content=f"question of {trace}")],
                "output": f"output of {trace}",
            }
        )
        activities.record_cost(request)
    activities.record_cost(answer_cost("answer-none", "acme", "small", 1.0))  # kept no transcript
    database.execute(
        "UPDATE transcripts SET created_at = now() - interval '31 days' WHERE trace_id = %s",
        "answer-old",
    )
    assert database.scalar("SELECT count(*) FROM transcripts") == 2
    purged = activities.purge_transcripts(CompactionInput(transcript_retention_days=30))
    assert purged.removed == 1
    assert database.rows("SELECT trace_id, output, messages FROM transcripts") == [
        (
            "answer-new",
            "output of answer-new",
            [{"role": "user", "content": "question of answer-new"}],
        )
    ]


def test_the_shadow_report_compares_candidate_and_live_answers(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    activities = CostActivities(database.sessions)
    a, b = uuid.uuid4(), uuid.uuid4()
    pairs = [
        # live answer, live citations, candidate answer, candidate citations
        (
            "answer-1",
            "Ken Thompson designed UTF-8 [1]",
            [a],
            "Ken Thompson designed UTF-8 [1]",
            [a],
        ),
        ("answer-2", "It began in a bakery [1]", [b], "I don't know", []),
    ]
    for trace, live_text, live_cites, cand_text, cand_cites in pairs:
        activities.record_cost(
            answer_cost(trace, "acme", "small", 1.0).model_copy(
                update={
                    "messages": [ChatMessage(role="user", content="q")],
                    "output": live_text,
                    "cited_chunks": live_cites,
                }
            )
        )
        activities.record_shadow(
            RecordShadowInput(
                live_trace_id=trace,
                trace_id=f"shadow-{trace}",
                tenant="acme",
                model="large",
                prompt_id="answer-v2",
                retrieval="dense",
                answer=cand_text,
                cited_chunks=cand_cites,
                total_ms=3000.0,
                engine_seconds=2.5,
                route="primary",
            )
        )
    with database.sessions() as session:
        (row,) = costs.shadow_report(session, costs.since_days(1))
    assert (row.candidate, row.pairs, row.agreement) == ("large / answer-v2 / dense", 2, 0.5)
    assert row.citation_overlap == pytest.approx(0.5)  # one identical pair, one disjoint
    assert row.live_p50_ms == pytest.approx(1040.0) and row.candidate_p50_ms == 3000.0
    assert (row.live_engine_seconds, row.candidate_engine_seconds) == (1.0, 2.5)

    monkeypatch.setenv("DURABLE_RAG_DATABASE_URL", database.url)
    printed = CliRunner().invoke(app, ["shadow", "report"])
    assert printed.exit_code == 0 and "large / answer-v2 / dense" in printed.output, printed.output


def test_forgetting_a_document_touches_only_the_answers_that_read_it(database: Database) -> None:
    """forget_document_answers: the transcripts of exactly the tenant's answers that read the
    document go, their replies are redacted and summaries folded from them deleted; the rest,
    another tenant's answer that names the same document id included, stays. Idempotent."""
    activities = CostActivities(database.sessions)
    document = uuid.uuid4()
    said = [ChatMessage(role="user", content="the codeword is quokka")]
    for trace, tenant, read in [
        ("answer-read", "acme", [document]),
        ("answer-other", "acme", [uuid.uuid4()]),
        ("answer-zeta", "zeta", [document]),
    ]:
        activities.record_cost(
            answer_cost(trace, tenant, "m", 1.0).model_copy(
                update={"read_documents": read, "messages": said, "output": "quokka"}
            )
        )
    conversation = ids.conversation_id("acme", "c1")
    with database.sessions.begin() as session:
        session.add(Conversation(id=conversation, tenant="acme", external_id="c1"))
        session.flush()
        for ordinal, role, trace in [
            (0, "user", ""),
            (1, "assistant", "answer-read"),
            (2, "user", ""),
            (3, "assistant", "answer-other"),
        ]:
            session.add(
                Turn(
                    conversation_id=conversation,
                    ordinal=ordinal,
                    role=role,
                    text=f"turn {ordinal} quokka",
                    citations=[{"number": 1}] if role == "assistant" else [],
                    trace_id=trace,
                )
            )
        for through in (0, 1, 3):
            session.add(Summary(conversation_id=conversation, text="s", summarized_through=through))

    forgot = activities.forget_document_answers(DocumentRef(tenant="acme", document_id=document))
    assert forgot.answer_workflow_ids == ["answer-read"] and forgot.conversations == ["c1"]
    assert forgot.turns_redacted == 1
    assert forgot.rows_removed == {
        "transcripts": 1,
        "answer_cache": 0,
        "shadow_runs": 0,
        "summaries": 2,  # folded through the reply (1) and after it (3); the one through 0 stays
    }
    turns = database.rows("SELECT ordinal, text, citations FROM turns ORDER BY ordinal")
    assert [t[1] for t in turns] == [
        "turn 0 quokka",
        REDACTED_REPLY,
        "turn 2 quokka",
        "turn 3 quokka",
    ]
    assert turns[1][2] == [] and turns[3][2] == [{"number": 1}]
    assert database.rows("SELECT summarized_through FROM summaries") == [(0,)]
    left = database.rows("SELECT trace_id FROM transcripts ORDER BY trace_id")
    assert left == [("answer-other",), ("answer-zeta",)]
    assert database.scalar("SELECT count(*) FROM answer_costs") == 3  # accounting stays

    again = activities.forget_document_answers(DocumentRef(tenant="acme", document_id=document))
    assert again.turns_redacted == 0 and set(again.rows_removed.values()) == {0}
    assert again.conversations == []  # nothing newly redacted: no conversation to reload


def test_rows_past_their_retention_go_in_batches_and_the_newest_report_of_a_set_stays(
    database: Database,
) -> None:
    from temporalio.testing import ActivityEnvironment

    from ragkit.db import CachedAnswer, EvalReportRow, ShadowRun

    activities = CostActivities(database.sessions)
    for n in range(25):
        activities.record_cost(answer_cost(f"answer-{n}", "acme", "small", 0.5))
    with database.sessions.begin() as session:
        for n in range(3):
            session.add(
                ShadowRun(
                    live_trace_id=f"answer-{n}", trace_id=f"shadow-{n}", tenant="acme",
                    model="m", prompt_id="p", retrieval="hybrid", answer="a", cited_chunks=[],
                    total_ms=1.0, engine_seconds=0.1, route="primary",
                )
            )  # fmt: skip
            session.add(
                CachedAnswer(
                    tenant="acme", question_key=f"q{n}", question="q", corpus_version="v",
                    answer="a", citations=[], model="m", trace_id=f"answer-{n}",
                )
            )  # fmt: skip
        for set_name, age in [("smoke", 500), ("smoke", 400), ("smoke", 10), ("old", 900)]:
            session.add(
                EvalReportRow(
                    workflow_id=f"eval-{set_name}-{age}", set_name=set_name, tenant="acme",
                    metrics={}, outcomes=[],
                )
            )  # fmt: skip
        # A conversation reply: its cost row stays while the reply does, however old, so that
        # forgetting a document can still find the reply through it.
        conversation = ids.conversation_id("acme", "kept")
        session.add(Conversation(id=conversation, tenant="acme", external_id="kept"))
        session.flush()
        session.add(
            Turn(conversation_id=conversation, ordinal=1, role="assistant", text="a reply",
                 trace_id="answer-24")
        )  # fmt: skip
    # 21 cost rows (answer-24 backs a reply), 2 shadow runs and 1 cached answer past retention.
    database.execute(
        "UPDATE answer_costs SET created_at = now() - interval '401 days' "
        "WHERE trace_id NOT IN ('answer-0', 'answer-1', 'answer-2')"
    )
    database.execute(
        "UPDATE shadow_runs SET created_at = now() - interval '91 days' WHERE trace_id <> 'shadow-0'"
    )
    database.execute(
        "UPDATE answer_cache SET created_at = now() - interval '31 days' WHERE question_key = 'q0'"
    )
    database.execute(
        "UPDATE eval_reports SET created_at = now() - make_interval(days => "
        "split_part(workflow_id, '-', 3)::int)"
    )
    heartbeats: list[object] = []
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *details: heartbeats.append(details)
    purged = env.run(activities.purge_expired, CompactionInput(batch_size=10))
    assert purged.removed == {
        "answer_costs": 21,
        "shadow_runs": 2,
        "answer_cache": 1,
        # smoke at 500 and 400 days go; smoke's newest and old's only report stay.
        "eval_reports": 2,
    }
    assert ("answer_costs", 10) in heartbeats and ("answer_costs", 21) in heartbeats
    assert database.rows("SELECT trace_id FROM answer_costs ORDER BY trace_id") == [
        ("answer-0",),
        ("answer-1",),
        ("answer-2",),
        ("answer-24",),
    ]
    assert database.rows("SELECT workflow_id FROM eval_reports ORDER BY workflow_id") == [
        ("eval-old-900",),
        ("eval-smoke-10",),
    ]
    again = env.run(activities.purge_expired, CompactionInput(batch_size=10))
    assert set(again.removed.values()) == {0}
