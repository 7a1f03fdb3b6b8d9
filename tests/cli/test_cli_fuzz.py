"""Fuzz the command line: bad arguments and options to every command exit with code 2 and a
message, before anything is connected to, and never with a traceback.

Runs in process (typer's CliRunner) with Temporal and Postgres pointed at closed ports: an input
the CLI wrongly lets through tries to connect and fails the test with exit 1, it starts nothing.
Inputs that are valid (they would connect) are skipped with `assume`; each predicate below says
what the command checks before connecting. Commands that start processes (`up`, `worker` with a
real kind, `gateway` with a port) only ever get inputs that cannot pass.
"""

from __future__ import annotations

import re
import string
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field, TypeAdapter, ValidationError
from typer.testing import CliRunner

from cli import app
from durable_rag.stack.process import free_port
from evals.answers import SETS
from schemas.answer import AskRequest
from schemas.common import TenantId
from schemas.conversation import ChatRequest, ConversationKey
from schemas.search import SearchRequest

runner = CliRunner()
DEFAULT_TENANT = "default"
COMMANDS = {
    "up", "down", "status", "worker", "migrate", "ingest", "search", "ask", "chat", "delete",
    "compact", "rebuild", "costs", "feedback", "eval", "shadow", "models", "schedules",
    "history", "gateway", "keys",
}  # fmt: skip
# Every command path, for unknown options: click parses options before the command runs.
COMMAND_PATHS = [
    *([c] for c in sorted(COMMANDS - {"costs", "shadow", "models", "schedules", "keys"})),
    ["costs", "top"], ["shadow", "report"], ["models", "active"], ["models", "swap"],
    ["schedules", "apply"], ["schedules", "list"], ["schedules", "trigger"],
    ["keys", "create"], ["keys", "list"], ["keys", "revoke"],
]  # fmt: skip


def budget(examples: int) -> Any:
    return settings(
        max_examples=examples,
        deadline=timedelta(seconds=10),  # a loaded CI machine; a real hang is minutes
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
    )


# What a shell can hand over: any text but NUL, plus the lone surrogates Python makes of bytes
# that are not UTF-8 (surrogateescape), Rich markup, option look-alikes and sheer length.
weird = st.one_of(
    st.text(alphabet=st.characters(exclude_characters="\x00"), max_size=24),
    st.sampled_from([
        "", " ", "-", "--x", "[/x]", "[bold]", "[/]", "\udcff", "a\udc80b", "💥", "\u202etxt",
        "x" * 9_000, "../../etc/passwd", "%s%n", "{0}", "$(id)", "a\nb", "\t", "０", "-1", "1e9",
        "nan", "inf", "-inf", "0x10", "1_0", "٣", "5.5", "null", "default", "a b",
    ]),
)  # fmt: skip
tenants = st.none() | weird | st.sampled_from(["acme", "t.1-x_y"])


def parses(value: str, kind: Any) -> bool:
    """Whether typer would accept `value` for an option of that type (it coerces with pydantic)."""
    try:
        TypeAdapter(kind).validate_python(value)
    except ValidationError:
        return False
    return True


def exists(path: str, folder: bool = False) -> bool:
    try:
        return Path(path).is_dir() if folder else Path(path).exists()
    except OSError:  # a name too long for the OS: the CLI reports it missing
        return False


def valid(model: type[BaseModel], **fields: Any) -> bool:
    try:
        model.model_validate(fields)
    except ValidationError:
        return False
    return True


def numbers(lowest: int, highest: int) -> st.SearchStrategy[str]:
    """Option values: in range, out of range, not numbers."""
    return st.one_of(
        st.integers(lowest - 5, highest + 5).map(str),
        st.integers().map(str),
        st.floats(allow_nan=True, allow_infinity=True).map(str),
        weird,
    )


@pytest.fixture(scope="module", autouse=True)
def nothing_to_connect_to() -> Iterator[None]:
    """Temporal and Postgres on ports where nothing listens, for every invocation."""
    env = {
        "DURABLE_RAG_TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}",
        "DURABLE_RAG_DATABASE_URL": f"postgresql+psycopg://fuzz@127.0.0.1:{free_port()}/fuzz",
        "DURABLE_RAG_DEFAULT_TENANT": DEFAULT_TENANT,
    }
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        # Warm the lazy imports of each command, so no example pays them inside its deadline.
        for args in (["search", ""], ["ask", ""], ["chat", "-m", ""], ["history", "a b"],
                     ["delete", "x"], ["eval", "x"], ["ingest", "/nonexistent"]):  # fmt: skip
            runner.invoke(app, args)
        yield


def check_usage_error(args: list[str]) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, (args, result.exit_code, result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    assert "error" in result.output.lower(), result.output


def option(name: str, value: str | None) -> list[str]:
    return [] if value is None else [name, value]


@budget(40)
@given(name=weird)
def test_unknown_commands(name: str) -> None:
    assume(name not in COMMANDS and name != "--help")
    check_usage_error([name])


@budget(40)
@given(
    path=st.sampled_from(COMMAND_PATHS),
    flag=st.text(alphabet=string.ascii_lowercase + "-", min_size=1, max_size=12),
    value=st.none() | weird,
)
def test_unknown_options_to_every_command(path: list[str], flag: str, value: str | None) -> None:
    # "--fuzz-…" is no command's option, so even `up` stops at parsing and starts nothing.
    check_usage_error([*path, f"--fuzz-{flag}", *([] if value is None else [value])])


@budget(50)
@given(query=weird, tenant=tenants, top_k=st.none() | numbers(1, 100), mode=st.none() | weird)
def test_search(query: str, tenant: str | None, top_k: str | None, mode: str | None) -> None:
    fields: dict[str, Any] = {"tenant": tenant or DEFAULT_TENANT, "query": query, "mode": mode}
    k_ok = top_k is None or parses(top_k, int)
    if k_ok:
        fields["top_k"] = 5 if top_k is None else TypeAdapter(int).validate_python(top_k)
    assume(not (k_ok and valid(SearchRequest, **fields)))
    opts = option("--tenant", tenant) + option("--top-k", top_k) + option("--mode", mode)
    check_usage_error(["search", *opts, "--", query])


@budget(50)
@given(
    question=weird,
    tenant=tenants,
    top_k=st.none() | numbers(1, 20),
    max_tokens=st.none() | numbers(1, 4_096),
)
def test_ask(question: str, tenant: str | None, top_k: str | None, max_tokens: str | None) -> None:
    ints_ok = all(v is None or parses(v, int) for v in (top_k, max_tokens))
    if ints_ok:
        adapter = TypeAdapter(int)
        fields = {
            "tenant": tenant or DEFAULT_TENANT,
            "question": question,
            "top_k": 5 if top_k is None else adapter.validate_python(top_k),
            "max_answer_tokens": 256 if max_tokens is None else adapter.validate_python(max_tokens),
        }
        assume(not valid(AskRequest, **fields))
    opts = option("--tenant", tenant) + option("-k", top_k) + option("--max-tokens", max_tokens)
    check_usage_error(["ask", *opts, "--", question])


@budget(50)
@given(
    conversation=st.none() | weird,
    tenant=tenants,
    messages=st.lists(weird, max_size=3),
    max_tokens=st.none() | numbers(1, 4_096),
)
def test_chat(
    conversation: str | None, tenant: str | None, messages: list[str], max_tokens: str | None
) -> None:
    if max_tokens is None or parses(max_tokens, int):
        key = {"tenant": tenant or DEFAULT_TENANT, "conversation_id": conversation or "chat-x"}
        tokens = 256 if max_tokens is None else TypeAdapter(int).validate_python(max_tokens)
        # With no message it reads stdin after connecting: valid then, as far as checks go.
        assume(
            not valid(ChatRequest, **key, message="?", max_answer_tokens=tokens)
            or not all(valid(ChatRequest, **key, message=m) for m in messages)
        )
    opts = option("--conversation", conversation) + option("--tenant", tenant)
    opts += option("--max-tokens", max_tokens)
    for message in messages:
        opts += ["--message", message]
    check_usage_error(["chat", *opts])


@budget(50)
@given(conversation=weird, tenant=tenants, delete=st.booleans())
def test_history(conversation: str, tenant: str | None, delete: bool) -> None:
    assume(
        not valid(ConversationKey, tenant=tenant or DEFAULT_TENANT, conversation_id=conversation)
    )
    opts = option("--tenant", tenant) + (["--delete"] if delete else [])
    check_usage_error(["history", *opts, "--", conversation])


class _Tenant(BaseModel):
    tenant: TenantId


@budget(50)
@given(
    document=weird | st.uuids().map(str) | st.uuids().map(lambda u: u.hex.upper()),
    tenant=tenants,
)
def test_delete(document: str, tenant: str | None) -> None:
    try:
        uuid.UUID(document)
    except ValueError:
        pass
    else:
        assume(not valid(_Tenant, tenant=tenant or DEFAULT_TENANT))
    check_usage_error(["delete", *option("--tenant", tenant), "--", document])


@budget(30)
@given(batch_size=numbers(10, 100_000))
def test_compact(batch_size: str) -> None:
    assume(not parses(batch_size, Annotated[int, Field(ge=10, le=100_000)]))
    check_usage_error(["compact", "--batch-size", batch_size])


@budget(30)
@given(grace=numbers(0, 30 * 86_400), wait=st.booleans())
def test_rebuild(grace: str, wait: bool) -> None:
    assume(not parses(grace, Annotated[float, Field(ge=0, le=30 * 86_400)]))
    check_usage_error(["rebuild", "--grace", grace, "--wait" if wait else "--no-wait"])


@budget(40)
@given(limit=st.none() | numbers(1, 1_000), days=st.none() | numbers(0, 3_650))
def test_costs_top(limit: str | None, days: str | None) -> None:
    assume(
        not (
            (limit is None or parses(limit, Annotated[int, Field(ge=1, le=1_000)]))
            and (days is None or parses(days, Annotated[float, Field(ge=0.01, le=3_650)]))
        )
    )
    check_usage_error(["costs", "top", *option("-n", limit), *option("--days", days)])


@budget(25)
@given(days=numbers(0, 3_650), tenant=tenants)
def test_shadow_report(days: str, tenant: str | None) -> None:
    assume(
        not parses(days, Annotated[float, Field(ge=0.01, le=3_650)])
        or (tenant and not valid(_Tenant, tenant=tenant))
    )
    check_usage_error(["shadow", "report", "--days", days, *option("--tenant", tenant)])


@budget(40)
@given(
    trace=weird,
    rating=weird | st.sampled_from(["up", "down"]),
    comment=st.none() | weird | st.just("c" * 2_001),
    tenant=tenants,
)
def test_feedback(trace: str, rating: str, comment: str | None, tenant: str | None) -> None:
    # A valid rating and comment go to Postgres, which says whether the trace id exists.
    assume(rating not in ("up", "down") or (comment is not None and len(comment) > 2_000))
    opts = option("--comment", comment) + option("--tenant", tenant)
    check_usage_error(["feedback", *opts, "--", trace, rating])


@budget(40)
@given(tenant=weird, name=st.none() | weird | st.just("n" * 129))
def test_keys_create(tenant: str, name: str | None) -> None:
    assume(not valid(_Tenant, tenant=tenant) or (name is not None and len(name) > 128))
    check_usage_error(["keys", "create", "--tenant", tenant, *option("--name", name)])


@budget(50)
@given(
    set_name=weird | st.just("answers-smoke"),
    tenant=st.none() | weird,
    corpus=st.none() | weird,
    concurrency=st.none() | numbers(1, 64),
)
def test_eval(
    set_name: str, tenant: str | None, corpus: str | None, concurrency: str | None
) -> None:
    known = (
        bool(re.fullmatch(r"[a-z0-9][a-z0-9_.-]{0,63}", set_name))
        and (SETS / f"{set_name}.jsonl").is_file()
    )
    assume(
        not (
            known
            and (corpus is None or exists(corpus, folder=True))
            and (concurrency is None or parses(concurrency, Annotated[int, Field(ge=1, le=64)]))
            and valid(_Tenant, tenant=("eval" if tenant is None else tenant) or DEFAULT_TENANT)
        )
    )
    opts = option("--tenant", tenant) + option("--corpus", corpus)
    opts += option("--concurrency", concurrency)
    check_usage_error(["eval", *opts, "--", set_name])


@budget(30)
@given(kind=weird)
def test_worker(kind: str) -> None:
    assume(kind not in ("orchestrator", "index", "llm"))  # those would run a worker
    check_usage_error(["worker", "--", kind])


@budget(30)
@given(model=weird, ready_timeout=st.none() | numbers(1, 86_400))
def test_models_swap(model: str, ready_timeout: str | None) -> None:
    assume(
        not (
            re.fullmatch(r"[a-z0-9._-]{1,64}", model)
            and (
                ready_timeout is None
                or parses(ready_timeout, Annotated[float, Field(ge=1, le=86_400)])
            )
        )
    )
    check_usage_error(["models", "swap", *option("--ready-timeout", ready_timeout), "--", model])


@budget(25)
@given(port=st.text(alphabet=string.ascii_letters + ":/.", min_size=1, max_size=10))
def test_gateway_port(port: str) -> None:
    assume(not parses(port, int))  # a port that parses would start serving
    check_usage_error(["gateway", "--port", port])


@budget(30)
@given(
    paths=st.lists(weird | st.sampled_from([".", "corpus", "README.md"]), min_size=1, max_size=3),
    tenant=tenants,
)
def test_ingest(paths: list[str], tenant: str | None) -> None:
    assume(not (all(exists(p) for p in paths) and valid(_Tenant, tenant=tenant or DEFAULT_TENANT)))
    check_usage_error(["ingest", *option("--tenant", tenant), "--", *paths])


def test_markup_in_bad_input_is_shown_verbatim() -> None:
    """Messages quote the input: Rich must print `[/x]`, not parse it (it raised MarkupError)."""
    result = runner.invoke(app, ["delete", "[/x] [bold]"])
    assert result.exit_code == 2
    assert "'[/x] [bold]' is not a document id" in result.output


ONCE_BUGS = {
    "delete-tenant": ["delete", str(uuid.uuid4()), "--tenant", "bad tenant"],
    "ingest-tenant": ["ingest", "README.md", "--tenant", "bad tenant"],
    "eval-tenant": ["eval", "answers-smoke", "--tenant", "bad tenant"],
    "rebuild-inf": ["rebuild", "--grace", "inf"],
    "rebuild-31-days": ["rebuild", "--grace", "2592001"],
    "ingest-path-too-long": ["ingest", "x" * 9_000],
    "eval-corpus-too-long": ["eval", "answers-smoke", "--corpus", "x" * 9_000],
    "markup-delete": ["delete", "[/x]"],
    "markup-worker": ["worker", "[/x]"],
    "markup-models-swap": ["models", "swap", "[/x]"],
    "markup-feedback": ["feedback", "t", "[/x]"],
    "markup-eval": ["eval", "[/x]"],
    "markup-ingest": ["ingest", "/nonexistent/[/x]"],
}


@pytest.mark.parametrize("args", list(ONCE_BUGS.values()), ids=list(ONCE_BUGS))
def test_bad_input_that_was_a_traceback_or_checked_too_late(args: list[str]) -> None:
    """Each of these was a bug: a bad tenant or grace passed the checks and failed after
    connecting (a traceback for delete, eval and rebuild; "cannot reach Temporal" with no stack),
    a path too long for the OS raised OSError, and Rich parsed `[/x]` in a message as markup
    (MarkupError)."""
    check_usage_error(args)
