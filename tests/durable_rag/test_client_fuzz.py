"""Property tests of the client helpers that build requests, plans and ids, and of the request
schemas every entry point validates with.

Arbitrary input gives either a valid object or a ValidationError / ValueError with a message;
never another exception. Whatever validates survives the trip through Temporal's pydantic data
converter unchanged (what a workflow receives is what the caller built). Workflow ids are
deterministic, within Temporal's length limit, and distinct for distinct requests.

The helpers under test read only settings: RagClient gets a client object that fails the test if
any attribute of it is touched, so nothing here needs (or could reach) a Temporal server.
"""

from __future__ import annotations

import os
import re
import uuid
from datetime import timedelta
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from durable_rag.client import PROMPT_OVERHEAD_TOKENS, RagClient
from ragkit import ids
from ragkit.ids import conversation_workflow_id, delete_workflow_id, ingest_workflow_id
from ragkit.settings import Settings
from schemas.answer import AnswerPlan, AskRequest
from schemas.conversation import ChatRequest, ConversationKey
from schemas.documents import DocumentRef
from schemas.gateway import AskBody, ChatCompletionBody, DocumentBody, MessageBody
from schemas.ingest import IngestRequest
from schemas.search import SearchRequest

# Temporal's default limit on a workflow id (frontend.workflowIdMaxLength... limit.maxIDLength).
MAX_WORKFLOW_ID_BYTES = 1_000
TENANT = re.compile(r"[A-Za-z0-9_.-]{1,64}")
SURROGATE = re.compile("[\ud800-\udfff]")


def budget(examples: int) -> Any:
    return settings(
        max_examples=examples,
        deadline=timedelta(seconds=5),  # a loaded CI machine; a real blow-up is minutes
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


class Untouchable:
    """Stands in for the Temporal client: the helpers under test must never use it."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"a request builder touched client.{name}")


SETTINGS = Settings()
RAG = RagClient(cast(Client, Untouchable()), SETTINGS)

tenants = st.from_regex(TENANT, fullmatch=True)
any_text = st.text(max_size=40)
paths = st.one_of(
    any_text,
    st.lists(st.sampled_from(["docs", "a b", "é", "..", ".", "x.md", "~", ""]), max_size=5).map(
        "/".join
    ),
    st.text(alphabet="/ab.-_é", max_size=300),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-10, 10_000),
    st.integers(),
    st.floats(),
    any_text,
    tenants,
    st.uuids().map(str),
    st.sampled_from(["hybrid", "dense", "keyword", "smollm2", "user", "up", "x" * 9_000]),
)
values = st.one_of(scalars, st.lists(scalars, max_size=4), st.lists(st.uuids().map(str)))


def from_schema(node: dict[str, Any], defs: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values that satisfy a (pydantic-made) JSON schema: the subset these models use."""
    if "$ref" in node:
        return st.deferred(lambda: from_schema(defs[node["$ref"].split("/")[-1]], defs))
    if "anyOf" in node:
        # Constraints beside anyOf (a maxLength, say) hold for each alternative.
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        return st.one_of([from_schema({**rest, **option}, defs) for option in node["anyOf"]])
    if "const" in node:
        return st.just(node["const"])
    if "enum" in node:
        return st.sampled_from(node["enum"])
    kind = node.get("type")
    if kind == "string":
        if node.get("format") == "uuid":
            return st.uuids().map(str)
        low, high = node.get("minLength", 0), min(node.get("maxLength", 40), 40)
        if "pattern" in node:
            return st.from_regex(node["pattern"], fullmatch=True).filter(
                lambda v: low <= len(v) <= node.get("maxLength", 10**9)
            )
        return st.text(min_size=low, max_size=max(low, high))
    if kind == "integer":
        return st.integers(node.get("minimum", -5), min(node.get("maximum", 10_000), 10_000))
    if kind == "number":
        return st.floats(node.get("minimum", -5.0), node.get("maximum", 5.0), allow_nan=False)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        low = node.get("minItems", 0)
        item = from_schema(node.get("items", {"type": "string"}), defs)
        return st.lists(item, min_size=low, max_size=max(low, min(node.get("maxItems", 3), 3)))
    if kind == "object":
        properties = node.get("properties", {})
        required = set(node.get("required", []))
        return st.fixed_dictionaries(
            {k: from_schema(v, defs) for k, v in properties.items() if k in required},
            optional={k: from_schema(v, defs) for k, v in properties.items() if k not in required},
        )
    return scalars


def bodies(model: type[BaseModel]) -> st.SearchStrategy[Any]:
    """Valid bodies, and valid bodies with one thing broken: a field set to junk, a required one
    left out, a field that does not exist."""
    schema = model.model_json_schema()
    valid = from_schema(schema, schema.get("$defs", {}))
    fields = sorted(model.model_fields)

    def broken(body: dict[str, Any], field: str, junk: Any, how: str) -> dict[str, Any]:
        body = dict(body)
        if how == "junk":
            body[field] = junk
        elif how == "drop":
            body.pop(field, None)
        else:
            body[f"{field}_extra"] = junk
        return body

    hows = st.sampled_from(["junk", "drop", "extra"])
    return st.one_of(
        valid,
        st.builds(broken, valid, st.sampled_from(fields), values, hows),
        st.dictionaries(st.sampled_from([*fields, "unknown"]), values, max_size=len(fields)),
    )


MODELS: list[type[BaseModel]] = [
    AskRequest, SearchRequest, IngestRequest, ChatRequest, ConversationKey, DocumentRef,
    AskBody, MessageBody, ChatCompletionBody, DocumentBody,
]  # fmt: skip


def valid(model: type[BaseModel], data: Any) -> bool:
    try:
        model.model_validate(data)
    except ValidationError:
        return False
    return True


def through_temporal(obj: BaseModel) -> BaseModel:
    converter = pydantic_data_converter.payload_converter
    return cast(BaseModel, converter.from_payloads(converter.to_payloads([obj]), [type(obj)])[0])


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_schemas_validate_anything_or_say_why(model: type[BaseModel]) -> None:
    @budget(150)
    @given(data=bodies(model) | values)
    def check(data: Any) -> None:
        event("validates" if valid(model, data) else "refused")
        try:
            obj = model.model_validate(data)
        except ValidationError as exc:
            assert exc.errors() and str(exc)
            return
        assert through_temporal(obj) == obj

    @budget(60)
    @given(raw=st.binary(max_size=200))
    def check_json(raw: bytes) -> None:
        try:
            obj = model.model_validate_json(raw)
        except ValidationError as exc:
            assert exc.errors()
            return
        assert through_temporal(obj) == obj

    check()
    check_json()


@budget(200)
@given(
    given_paths=st.lists(paths, max_size=4),
    tenant=st.none() | any_text | tenants,
)
def test_ingest_request_and_its_workflow_id(given_paths: list[str], tenant: str | None) -> None:
    assume(
        not any(p.startswith("~") for p in given_paths)
    )  # ~user paths depend on the machine: tested apart below
    try:
        request = RAG.ingest_request(given_paths, tenant)
    except ValidationError as exc:
        assert exc.errors()
        return
    assert request.tenant == (tenant or SETTINGS.default_tenant)
    assert all(os.path.isabs(p) for p in request.paths)
    assert request.batch_documents == SETTINGS.ingest.batch_documents
    if any(SURROGATE.search(p) for p in request.paths):
        # A name that was not UTF-8 on disk (Python keeps its bytes as lone surrogates): no id
        # can hash it, and no payload can carry it (discover_files reports such a file as unreadable).
        with pytest.raises(UnicodeEncodeError):
            ingest_workflow_id(request)
        return
    workflow_id = ingest_workflow_id(request)
    assert workflow_id == ingest_workflow_id(RAG.ingest_request(given_paths, tenant))
    assert workflow_id == ingest_workflow_id(RAG.ingest_request(given_paths[::-1], tenant))
    assert re.fullmatch(
        rf"ingest-{re.escape(request.tenant)}:[a-z0-9-]+-[0-9a-f]{{16}}", workflow_id
    )
    assert len(workflow_id.encode()) <= MAX_WORKFLOW_ID_BYTES
    assert through_temporal(request) == request


sources = st.text(
    alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\x00"),
    min_size=1,
    max_size=20,
)


@budget(200)
@given(
    first=st.tuples(tenants, st.lists(sources, min_size=1, max_size=3)),
    second=st.tuples(tenants, st.lists(sources, min_size=1, max_size=3)),
)
def test_different_ingests_never_share_a_workflow_id(
    first: tuple[str, list[str]], second: tuple[str, list[str]]
) -> None:
    """Starting an ingest attaches to a running one with the same id: two different requests
    sharing an id would ingest only the first one's files."""
    assume(not any(p.startswith("~") for p in first[1] + second[1]))
    a = RAG.ingest_request(first[1], first[0])
    b = RAG.ingest_request(second[1], second[0])
    assume((a.tenant, sorted(a.paths)) != (b.tenant, sorted(b.paths)))
    assert ingest_workflow_id(a) != ingest_workflow_id(b)


def test_a_path_under_an_unknown_users_home_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        RAG.ingest_request(["~no-such-user-here/notes.md"], "acme")


@budget(200)
@given(
    request=st.builds(
        AskRequest,
        tenant=tenants,
        question=st.text(min_size=1, max_size=50),
        top_k=st.integers(1, 20),
        max_answer_tokens=st.integers(1, 4_096),
        model=st.none() | st.from_regex(r"[a-z0-9._-]{1,64}", fullmatch=True),
    ),
    default_model=st.sampled_from(["", "smol-v2", SETTINGS.llm.name]) | any_text,
)
def test_answer_plan_is_a_plan_or_a_value_error(request: AskRequest, default_model: str) -> None:
    try:
        plan = RAG.answer_plan(
            request.max_answer_tokens, request.top_k, request.model or default_model
        )
    except ValueError as exc:
        assert not isinstance(exc, ValidationError), exc
        assert "max_answer_tokens" in str(exc) or "no room for context" in str(exc)
        assert request.max_answer_tokens > SETTINGS.llm.max_answer_tokens or (
            SETTINGS.llm.max_model_len - request.max_answer_tokens - PROMPT_OVERHEAD_TOKENS < 64
        )
        return
    assert isinstance(plan, AnswerPlan)
    assert plan.model == (request.model or default_model or SETTINGS.llm.name)
    assert plan.context_tokens + request.max_answer_tokens + PROMPT_OVERHEAD_TOKENS == (
        SETTINGS.llm.max_model_len
    )
    assert plan.retrieval.candidates >= request.top_k
    assert plan == RAG.answer_plan(
        request.max_answer_tokens, request.top_k, request.model or default_model
    ), "the same request, the same plan"
    assert through_temporal(plan) == plan


@budget(200)
@given(text=st.text(max_size=200), length=st.integers(1, 80))
def test_slug_is_a_short_safe_fragment(text: str, length: int) -> None:
    slug = ids.slug(text, length)
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", slug), slug
    assert len(slug) <= max(length, 1)
    assert slug == ids.slug(text, length)


@budget(200)
@given(first=st.tuples(tenants, sources), second=st.tuples(tenants, sources))
def test_document_ids_are_deterministic_and_distinct(
    first: tuple[str, str], second: tuple[str, str]
) -> None:
    assert ids.document_id(*first) == ids.document_id(*first)
    assert ids.conversation_id(*first) == ids.conversation_id(*first)
    if first != second:
        assert ids.document_id(*first) != ids.document_id(*second)
        assert ids.conversation_id(*first) != ids.conversation_id(*second)
    document = ids.document_id(*first)
    assert ids.chunk_id(document, 1, 0) != ids.chunk_id(document, 1, 1)
    assert ids.chunk_id(document, 1, 0) != ids.chunk_id(document, 2, 0)


@budget(100)
@given(parts=st.lists(st.text(max_size=20), max_size=4), length=st.integers(1, 64))
def test_hashes_of_any_text_are_hex_or_a_value_error(parts: list[str], length: int) -> None:
    try:
        digest = ids.short_hash(*parts, length=length)
    except UnicodeEncodeError:  # a ValueError: lone surrogates are not text to hash
        assert any(SURROGATE.search(p) for p in parts)
        return
    assert re.fullmatch(r"[0-9a-f]*", digest) and len(digest) == min(length, 64)
    assert digest == ids.short_hash(*parts, length=length)


@budget(200)
@given(tenant=st.none() | any_text | tenants, conversation=any_text | tenants)
def test_conversation_workflow_ids(tenant: str | None, conversation: str) -> None:
    try:
        key = ConversationKey(tenant=tenant or "default", conversation_id=conversation)
    except ValidationError:
        return
    workflow_id = conversation_workflow_id(key.tenant, key.conversation_id)
    assert workflow_id == conversation_workflow_id(key.tenant, key.conversation_id)
    assert workflow_id.isascii() and len(workflow_id.encode()) <= MAX_WORKFLOW_ID_BYTES
    try:
        RAG.conversation_input(key.tenant, key.conversation_id)
    except ValueError as exc:  # the settings' answer budget leaves no context
        assert "max_answer_tokens" in str(exc) or "no room" in str(exc)


@budget(100)
@given(tenant=any_text | tenants, document=st.uuids() | any_text)
def test_delete_workflow_ids(tenant: str, document: uuid.UUID | str) -> None:
    try:
        ref = DocumentRef.model_validate({"tenant": tenant, "document_id": document})
    except ValidationError:
        return
    workflow_id = delete_workflow_id(ref)
    assert workflow_id == f"delete-{ref.tenant}:{ref.document_id}"
    assert workflow_id.isascii() and len(workflow_id.encode()) <= MAX_WORKFLOW_ID_BYTES


def test_the_helpers_never_touched_the_client() -> None:
    """The Untouchable raises on any use, so every test above passing proves it; this checks
    the trap itself works."""
    with pytest.raises(AssertionError, match=r"touched client\.start_workflow"):
        RAG.client.start_workflow  # noqa: B018
