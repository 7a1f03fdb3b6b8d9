"""Workflow ids are injective in the tenant and the caller's input: each id built from them parses
back to exactly that pair, so two different pairs never share a workflow (ragkit/ids.py).

The strategies are adversarial on purpose: tenants and conversation ids made of the characters that
separate parts (`-`, `.`, `_`, `:`), so `acme` + `corp-42` and `acme-corp` + `42` come up early.
"""

from __future__ import annotations

import re
import uuid
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragkit import ids
from schemas.documents import DocumentRef
from schemas.ingest import IngestRequest

FIXED = settings(
    max_examples=300,
    deadline=timedelta(seconds=5),
    derandomize=True,  # a fixed example budget, the same examples on every run
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

# What schemas.common.TenantId and schemas.conversation.CONVERSATION_ID_PATTERN admit, drawn from
# few letters so that prefixes and separators line up between the two sides.
tenants = st.text(alphabet="ac-._", min_size=1, max_size=12)
conversations = st.text(alphabet="ac-._:", min_size=1, max_size=12)
keys = st.text(alphabet="ac-._:", min_size=1, max_size=12)

CONVERSATION = re.compile(r"^conversation-(?P<tenant>[^:]+):(?P<rest>.+)$")


def parse_conversation(workflow_id: str) -> tuple[str, str]:
    found = CONVERSATION.match(workflow_id)
    assert found, workflow_id
    return found["tenant"], found["rest"]


@FIXED
@given(tenant=tenants, conversation=conversations)
def test_a_conversation_id_parses_back_to_its_tenant_and_conversation(
    tenant: str, conversation: str
) -> None:
    assert parse_conversation(ids.conversation_workflow_id(tenant, conversation)) == (
        tenant,
        conversation,
    )


@FIXED
@given(a=st.tuples(tenants, conversations), b=st.tuples(tenants, conversations))
def test_two_conversations_never_share_a_workflow(a: tuple[str, str], b: tuple[str, str]) -> None:
    if a != b:
        assert ids.conversation_workflow_id(*a) != ids.conversation_workflow_id(*b)


def test_the_pair_that_collided_no_longer_does() -> None:
    assert ids.legacy_conversation_workflow_id(
        "acme", "corp-42"
    ) == ids.legacy_conversation_workflow_id("acme-corp", "42")
    assert ids.conversation_workflow_id("acme", "corp-42") != ids.conversation_workflow_id(
        "acme-corp", "42"
    )


@FIXED
@given(tenant=tenants, conversation=conversations, ordinal=st.integers(0, 10_000))
def test_a_turns_answer_parses_back_to_its_conversation_and_ordinal(
    tenant: str, conversation: str, ordinal: int
) -> None:
    workflow_id = ids.turn_answer_workflow_id(
        ids.conversation_workflow_id(tenant, conversation), ordinal
    )
    head, _, tail = workflow_id.removeprefix("answer-").rpartition("-")
    assert parse_conversation(head) == (tenant, conversation) and int(tail) == ordinal


@FIXED
@given(tenant=tenants, document=st.uuids())
def test_a_delete_id_parses_back_to_its_document(tenant: str, document: uuid.UUID) -> None:
    ref = DocumentRef(tenant=tenant, document_id=document)
    owner, _, rest = ids.delete_workflow_id(ref).removeprefix("delete-").partition(":")
    assert (owner, uuid.UUID(rest)) == (tenant, document)


@FIXED
@given(
    a=st.tuples(tenants, keys | st.none()),
    b=st.tuples(tenants, keys | st.none()),
    name=st.text(alphabet="ac-.:/ ", max_size=12),
)
def test_uploads_and_ingests_never_share_a_workflow(
    a: tuple[str, str | None], b: tuple[str, str | None], name: str
) -> None:
    """Keyed uploads, unkeyed uploads (each fresh) and path ingests: different requests never
    meet, and the same keyed request always does."""
    first = ids.upload_workflow_id(a[0], name, a[1], "f1")
    second = ids.upload_workflow_id(b[0], name, b[1], "f2")
    assert (first == second) == (a == b and a[1] is not None)
    path_ingest = ids.ingest_workflow_id(IngestRequest(tenant=a[0], paths=[f"/d/{name}"]))
    assert path_ingest not in (first, second)
    assert path_ingest.startswith(f"ingest-{a[0]}:")


@FIXED
@given(a=st.tuples(tenants, keys), b=st.tuples(tenants, keys))
def test_a_trace_id_is_the_servers_and_a_key_names_a_run_within_its_tenant_only(
    a: tuple[str, str], b: tuple[str, str]
) -> None:
    trace_a, trace_b = ids.trace_id(*a, "fresh-a"), ids.trace_id(*b, "fresh-b")
    assert (trace_a == trace_b) == (a == b)
    assert re.fullmatch(r"[0-9a-f]{32}", trace_a), "the caller's text never reaches the id"
    assert ids.trace_id(a[0], None, "fresh") == "fresh"


def test_a_tenant_with_the_separator_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot contain"):
        ids.conversation_workflow_id("acme:corp", "42")


@FIXED
@given(
    tenant=tenants,
    other=tenants,
    conversation=conversations,
    ordinal=st.integers(0, 10_000),
    document=st.uuids(),
    key=keys,
)
def test_every_tenant_scoped_run_names_its_tenant_and_no_other(
    tenant: str, other: str, conversation: str, ordinal: int, document: uuid.UUID, key: str
) -> None:
    """What a tenant deletion finds by id: each run built from the tenant, and those derived
    from them, name exactly that tenant; the deletion's own run names none."""
    chat = ids.conversation_workflow_id(tenant, conversation)
    answer = ids.turn_answer_workflow_id(chat, ordinal)
    scoped = [
        chat,
        answer,
        ids.shadow_workflow_id(answer),
        ids.forget_workflow_id(chat, uuid.UUID(int=ordinal).hex),
        ids.delete_workflow_id(DocumentRef(tenant=tenant, document_id=document)),
        ids.upload_workflow_id(tenant, "n", key, "f"),
        ids.ingest_workflow_id(IngestRequest(tenant=tenant, paths=[f"/d/{key}"])),
    ]
    for workflow_id in scoped:
        assert ids.tenant_of(workflow_id) == tenant, workflow_id
    assert ids.tenant_of(ids.delete_tenant_workflow_id(other)) is None
    trace = ids.trace_id(tenant, key, "fresh")  # answers and searches: their memo names it
    assert ids.tenant_of(ids.answer_workflow_id(trace)) is None
    assert ids.tenant_of(ids.search_workflow_id(trace)) is None


def test_two_runs_of_one_workflow_a_moment_apart_get_two_forgets() -> None:
    """Run ids are UUIDv7: runs started within a minute share their first characters."""
    first, second = "01a2355f-bd63-781b-b221-105aee211313", "01a2355f-bd98-764d-8263-d475bd528ef6"
    workflow_id = "delete-t:6074bea9-056f-4926-8380-a68976a97de9"
    assert ids.forget_workflow_id(workflow_id, first) != ids.forget_workflow_id(workflow_id, second)
