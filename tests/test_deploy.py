"""Checks of the production deployment files: docker-compose.yml, Dockerfile and deploy/.

Nothing here needs a Docker engine. The command-line validators (docker-compose 1.29 from Debian,
promtool and amtool) are required: a missing tool fails the test instead of skipping it, because
a skipped deployment check looks like a passing one. `make test` installs them.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
DEPLOY = ROOT / "deploy"
PROMETHEUS_CONFIG = DEPLOY / "prometheus" / "prometheus.yml"
PROMETHEUS_RULES = DEPLOY / "prometheus" / "alerts.yml"
ALERTMANAGER_CONFIG = DEPLOY / "alertmanager" / "alertmanager.yml"
GRAFANA_PROVISIONING = DEPLOY / "grafana" / "provisioning"
GRAFANA_DASHBOARDS = DEPLOY / "grafana" / "dashboards"

REQUIRED_SERVICES = {
    "postgres",
    "temporal-postgres",
    "temporal",
    "temporal-ui",
    "qdrant",
    "migrate",
    "cpu-worker",
    "gpu-worker",
    "prometheus",
    "alertmanager",
    "grafana",
}
ONE_SHOT_SERVICES = {"migrate", "schedules"}
WORKERS = ("cpu-worker", "gpu-worker")
ENV_PREFIX = "DURABLE_RAG_"
ENV_NAME = re.compile(r"\bDURABLE_RAG_[A-Z0-9_]+\b")


def _require_tool(name: str, package: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(
            f"`{name}` is not installed, so this deployment check cannot run. `make test` installs "
            f"it (or: apt-get update && apt-get install -y {package}).",
            pytrace=False,
        )
    return path


def _run(cmd: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd, check=False, cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def _assert_ok(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 0, (
        f"{' '.join(proc.args)} exited {proc.returncode}\n"
        f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"
    )


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(data, dict) and isinstance(data.get("services"), dict)
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def _environment(service: dict[str, Any]) -> dict[str, str | None]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        pairs = (item.split("=", 1) for item in env)
        return {p[0]: (p[1] if len(p) > 1 else None) for p in pairs}
    return {str(k): (None if v is None else str(v)) for k, v in env.items()}


def _depends_on(service: dict[str, Any]) -> dict[str, dict[str, Any]]:
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return {name: {"condition": "service_started"} for name in deps}
    return deps


# --------------------------------------------------------------------------------------------------
# docker-compose.yml
# --------------------------------------------------------------------------------------------------


def test_compose_file_validates_with_docker_compose() -> None:
    exe = _require_tool("docker-compose", "docker-compose")
    _assert_ok(_run([exe, "-f", str(COMPOSE_FILE), "config", "-q"]))


def test_required_services_exist(services: dict[str, dict[str, Any]]) -> None:
    missing = REQUIRED_SERVICES - services.keys()
    assert not missing, f"docker-compose.yml lacks services: {sorted(missing)}"


def test_no_two_services_publish_the_same_host_port(services: dict[str, dict[str, Any]]) -> None:
    published: dict[str, str] = {}
    for name, service in services.items():
        for port in service.get("ports", []):
            host = str(port).split(":")[0] if ":" in str(port) else str(port)
            assert host not in published, f"{name} and {published[host]} both publish {host}"
            published[host] = name


def test_every_long_running_service_has_a_healthcheck(services: dict[str, dict[str, Any]]) -> None:
    lacking = []
    for name, service in services.items():
        if name in ONE_SHOT_SERVICES:
            continue
        check = service.get("healthcheck")
        if not check or check.get("disable") or not check.get("test"):
            lacking.append(name)
    assert not lacking, f"services without a healthcheck: {lacking}"


def test_migrate_is_a_one_shot_after_postgres(services: dict[str, dict[str, Any]]) -> None:
    migrate = services["migrate"]
    assert str(migrate.get("restart", "no")) == "no"
    assert _depends_on(migrate)["postgres"]["condition"] == "service_healthy"
    command = migrate.get("command")
    entrypoint = migrate.get("entrypoint")
    words = []
    for part in (entrypoint, command):
        words += part.split() if isinstance(part, str) else list(part or [])
    assert words[-3:] == ["alembic", "upgrade", "head"], words
    env = _environment(migrate)
    assert set(env) == {"DURABLE_RAG_DATABASE_URL"}, env


def test_a_one_shot_applies_the_schedules(services: dict[str, dict[str, Any]]) -> None:
    """The schedules exist in production without anyone running a command: a one-shot service
    runs the CLI's `schedules apply` once Temporal is up."""
    from typer.main import get_command

    from cli import app

    one_shot = services["schedules"]
    assert str(one_shot.get("restart", "no")) == "no"
    words = [*one_shot["entrypoint"], *one_shot["command"]]
    assert words == ["durable-rag", "schedules", "apply"], words
    group = get_command(app).commands["schedules"]  # type: ignore[attr-defined]
    assert "apply" in group.commands
    deps = _depends_on(one_shot)
    assert deps["temporal"]["condition"] == "service_healthy"
    assert deps["migrate"]["condition"] == "service_completed_successfully"
    # The schedules' inputs are payloads: sealed like every other service's.
    assert _environment(one_shot).get("DURABLE_RAG_SECURITY_PAYLOAD_ENCRYPTION") == "true"
    assert "payload-keys" in one_shot.get("secrets", [])


def test_router_fallback_and_summary_models_can_be_configured(compose: dict[str, Any]) -> None:
    env = _environment(compose["services"]["gateway"])
    for name in (
        "DURABLE_RAG_LLM_FALLBACK_MODEL",
        "DURABLE_RAG_ROUTER_SMALL_MODEL",
        "DURABLE_RAG_ROUTER_LARGE_MODEL",
        "DURABLE_RAG_CONVERSATION_SUMMARY_MODEL",
    ):
        # From the shell or an .env file; unset: no such model.
        assert env.get(name) == f"${{{name}:-}}", (name, env.get(name))


@pytest.mark.parametrize("worker", WORKERS)
def test_workers_wait_for_migrations_and_temporal(
    services: dict[str, dict[str, Any]], worker: str
) -> None:
    deps = _depends_on(services[worker])
    assert deps.get("migrate", {}).get("condition") == "service_completed_successfully", deps
    assert deps.get("temporal", {}).get("condition") == "service_healthy", deps


def test_gpu_worker_waits_for_qdrant(services: dict[str, dict[str, Any]]) -> None:
    deps = _depends_on(services["gpu-worker"])
    assert deps.get("qdrant", {}).get("condition") == "service_healthy", deps


def test_gpu_worker_reserves_an_nvidia_gpu(services: dict[str, dict[str, Any]]) -> None:
    devices = (
        services["gpu-worker"]
        .get("deploy", {})
        .get("resources", {})
        .get("reservations", {})
        .get("devices", [])
    )
    assert any(
        d.get("driver") == "nvidia"
        and "gpu" in d.get("capabilities", [])
        and (d.get("count") in (1, "all") or d.get("device_ids"))
        for d in devices
    ), devices
    assert _environment(services["gpu-worker"]).get("DURABLE_RAG_EMBEDDING_DEVICE") == "cuda"


@pytest.mark.parametrize("worker", WORKERS)
def test_workers_run_in_production_profile_with_metrics(
    services: dict[str, dict[str, Any]], worker: str
) -> None:
    env = _environment(services[worker])
    assert env.get("DURABLE_RAG_PROFILE") == "production"
    assert env.get("DURABLE_RAG_METRICS_PORT") == "9100"
    assert env.get("DURABLE_RAG_TEMPORAL_ADDRESS") == "temporal:7233"
    healthcheck = " ".join(map(str, services[worker]["healthcheck"]["test"]))
    assert ":9100/metrics" in healthcheck


def test_production_seals_every_payload_with_the_mounted_keyring(
    compose: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    """Every process that talks to Temporal encrypts (they must agree), with the keyring from a
    compose secret, never from the image or a variable."""
    talking = [n for n, s in services.items() if _environment(s).get("DURABLE_RAG_PROFILE")]
    assert {"cpu-worker", "gpu-worker", "llm-worker", "gateway"} <= set(talking)
    for name in talking:
        env = _environment(services[name])
        assert env.get("DURABLE_RAG_SECURITY_PAYLOAD_ENCRYPTION") == "true", name
        assert env.get("DURABLE_RAG_SECURITY_PAYLOAD_KEYS_FILE") == "/run/secrets/payload-keys"
        assert "payload-keys" in services[name].get("secrets", []), name
        assert "DURABLE_RAG_SECURITY_PAYLOAD_KEYS" not in env, name
    assert compose["secrets"]["payload-keys"]["file"] == "./deploy/secrets/payload-keys"


def test_every_process_traces_to_the_collector_which_feeds_the_viewer(
    services: dict[str, dict[str, Any]],
) -> None:
    """Each of our processes exports OTLP to the collector (tenant text left out: payloads are
    sealed), and the collector's one traces pipeline ends at the viewer the compose runs."""
    talking = [n for n, s in services.items() if _environment(s).get("DURABLE_RAG_PROFILE")]
    for name in talking:
        env = _environment(services[name])
        # On unless the operator's environment says otherwise.
        assert env["DURABLE_RAG_TRACING_ENABLED"] == "${DURABLE_RAG_TRACING_ENABLED:-true}", name
        assert env["DURABLE_RAG_TRACING_ENDPOINT"] == "http://otel-collector:4318/v1/traces"
        assert env["DURABLE_RAG_TRACING_CAPTURE_CONTENT"] == "false", name
    collector = services["otel-collector"]
    mounted = collector["volumes"][0].split(":")[0]
    config = yaml.safe_load((ROOT / mounted).read_text())
    http = config["receivers"]["otlp"]["protocols"]["http"]["endpoint"]
    assert http.endswith(":4318")
    pipeline = config["service"]["pipelines"]["traces"]
    assert pipeline["receivers"] == ["otlp"]
    [exporter] = pipeline["exporters"]
    assert config["exporters"][exporter]["endpoint"] == "http://phoenix:6006"
    assert "6006:6006" in services["phoenix"]["ports"]
    assert "phoenix" in _depends_on(collector)


def test_images_build_from_existing_dockerfile_targets(services: dict[str, dict[str, Any]]) -> None:
    stages = set(
        re.findall(r"(?im)^\s*FROM\s+\S+\s+AS\s+([A-Za-z0-9_.-]+)\s*$", DOCKERFILE.read_text())
    )
    assert {"cpu", "gpu"} <= stages, stages
    wanted = {"migrate": "cpu", "cpu-worker": "cpu", "gpu-worker": "gpu"}
    for name, target in wanted.items():
        build = services[name].get("build")
        assert isinstance(build, dict), f"{name} has no build section"
        assert build.get("target") == target, (name, build)
        assert (
            ROOT / build.get("context", ".") / build.get("dockerfile", "Dockerfile")
        ).resolve() == DOCKERFILE


def test_the_image_copies_every_package_the_project_installs() -> None:
    """A package left out of the image's COPY list installs nothing and fails on import."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = {p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    copied = set(re.findall(r"(?m)^COPY\s+([A-Za-z0-9_]+)/\s", DOCKERFILE.read_text()))
    assert packages, "found no packages in pyproject.toml: the scan is broken"
    assert packages <= copied, f"not copied into the image: {sorted(packages - copied)}"


def test_the_images_install_the_lock_make_installs() -> None:
    """The same versions in the images as in `make venv`: the cpu target installs the lock
    itself; the gpu target its own lock, the CUDA build's tree (tests/test_packaging.py checks
    that the two agree on every package we declare)."""
    text = DOCKERFILE.read_text()
    stages = dict(re.findall(r"(?ms)^FROM\s+\S+\s+AS\s+(\S+)\s*$(.*?)(?=^FROM\s|\Z)", text))
    assert "requirements.lock" in re.findall(r"(?m)^COPY\s+(.*)$", stages["source"])[0]
    assert "pip install --no-deps -r requirements.lock" in stages["cpu"]
    assert re.search(r"pip install --no-deps \.", stages["cpu"])
    assert "requirements-gpu.lock" in re.findall(r"(?m)^COPY\s+(.*)$", stages["source"])[0]
    assert "pip install --no-deps -r requirements-gpu.lock" in stages["gpu"]
    assert re.search(r'pip install --no-deps "\.\[gpu\]"', stages["gpu"])


def test_bind_mounted_deploy_files_exist(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        for volume in service.get("volumes", []):
            source = (
                volume.split(":", 1)[0] if isinstance(volume, str) else volume.get("source", "")
            )
            if source.startswith("./"):
                assert (ROOT / source).exists(), f"{name} mounts missing {source}"


def test_compose_env_vars_are_settings_fields(compose: dict[str, Any]) -> None:
    names: set[str] = set(ENV_NAME.findall(COMPOSE_FILE.read_text()))
    for service in compose["services"].values():
        names |= {k for k in _environment(service) if k.startswith(ENV_PREFIX)}
    assert names, "no DURABLE_RAG_* variables found in docker-compose.yml"

    from ragkit.settings import FLAT_NAMES

    unknown = sorted(
        name for name in names if name.removeprefix(ENV_PREFIX).lower() not in FLAT_NAMES
    )
    assert not unknown, f"DURABLE_RAG_* variables that are not Settings fields: {unknown}"


# --------------------------------------------------------------------------------------------------
# Prometheus / Alertmanager
# --------------------------------------------------------------------------------------------------


def test_prometheus_rules_are_valid() -> None:
    exe = _require_tool("promtool", "prometheus")
    _assert_ok(_run([exe, "check", "rules", str(PROMETHEUS_RULES)]))


def test_every_user_facing_alert_fires_in_its_unit_test() -> None:
    exe = _require_tool("promtool", "prometheus")
    tests = PROMETHEUS_RULES.with_name("alerts.test.yml")
    _assert_ok(_run([exe, "test", "rules", str(tests)]))
    rules = yaml.safe_load(PROMETHEUS_RULES.read_text())
    users = next(g for g in rules["groups"] if g["name"] == "durable-rag-users")
    tested = {
        case["alertname"]
        for test in yaml.safe_load(tests.read_text())["tests"]
        for case in test["alert_rule_test"]
        if case["exp_alerts"]
    }
    assert {r["alert"] for r in users["rules"]} <= tested
    for rule in users["rules"]:  # context with every alert (R22)
        assert "dashboard" in rule["annotations"], rule["alert"]
        assert "req/s" in rule["annotations"]["description"], rule["alert"]


def test_every_process_of_ours_has_a_down_alert_that_fires_in_its_unit_test() -> None:
    """Each kind of worker and the gateway: a scrape job, an `up` alert over it, and a unit test
    in which that alert fires for that job."""
    ours = {"cpu-worker", "gpu-worker", "llm-worker", "gateway"}
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    assert ours <= {job["job_name"] for job in config["scrape_configs"]}
    rules = yaml.safe_load(PROMETHEUS_RULES.read_text())
    down: dict[str, str] = {}  # job -> alert
    for rule in (r for g in rules["groups"] for r in g["rules"] if "alert" in r):
        matched = re.match(r'^up\{job=(~?)"([^"]+)"\}\s*==\s*0$', rule["expr"].strip())
        if matched is None:
            continue
        regex, jobs = matched.groups()
        for job in ours:
            if re.fullmatch(jobs, job) if regex else jobs == job:
                down[job] = rule["alert"]
    assert ours <= down.keys(), f"no down alert for {sorted(ours - down.keys())}"
    tests = yaml.safe_load(PROMETHEUS_RULES.with_name("alerts.test.yml").read_text())["tests"]
    fired = {
        (case["alertname"], alert["exp_labels"].get("job"))
        for test in tests
        for case in test["alert_rule_test"]
        for alert in case["exp_alerts"]
    }
    assert {(down[job], job) for job in ours} <= fired


def test_the_error_sli_counts_failed_streams_and_leaves_out_health_checks() -> None:
    from ragkit.metrics import HTTP_STREAM_ERRORS

    rules = yaml.safe_load(PROMETHEUS_RULES.read_text())
    errors = next(
        r for g in rules["groups"] for r in g["rules"] if r.get("alert") == "AnswerErrorRateHigh"
    )
    assert f"{HTTP_STREAM_ERRORS._name}_total" in errors["expr"]
    assert errors["expr"].count('route!~"/healthz|/readyz|/metrics"') == 2  # both sides


def test_prometheus_config_is_valid() -> None:
    exe = _require_tool("promtool", "prometheus")
    _assert_ok(_run([exe, "check", "config", str(PROMETHEUS_CONFIG)]))


def test_prometheus_scrapes_the_stack() -> None:
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    targets = {
        target
        for job in config["scrape_configs"]
        for static in job.get("static_configs", [])
        for target in static.get("targets", [])
    }
    assert {
        "temporal:9090",
        "cpu-worker:9100",
        "gpu-worker:9100",
        "qdrant:6333",
        "gateway:8080",
    } <= targets, targets
    rule_files = config.get("rule_files", [])
    assert any((PROMETHEUS_CONFIG.parent / f).resolve() == PROMETHEUS_RULES for f in rule_files)


def test_every_alert_has_summary_and_description() -> None:
    rules = yaml.safe_load(PROMETHEUS_RULES.read_text())
    alerts = [r for g in rules["groups"] for r in g["rules"] if "alert" in r]
    assert any(a["alert"] == "WorkerDown" for a in alerts)
    for alert in alerts:
        annotations = alert.get("annotations", {})
        assert annotations.get("summary") and annotations.get("description"), alert["alert"]


def test_alertmanager_config_is_valid() -> None:
    exe = _require_tool("amtool", "prometheus-alertmanager")
    _assert_ok(_run([exe, "check-config", str(ALERTMANAGER_CONFIG)]))


# --------------------------------------------------------------------------------------------------
# Grafana
# --------------------------------------------------------------------------------------------------


def _dashboards() -> list[Path]:
    return sorted(GRAFANA_DASHBOARDS.glob("*.json"))


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for panel in dashboard.get("panels", []):
        out.append(panel)
        out.extend(panel.get("panels", []))  # collapsed rows hold their panels
    return out


def test_dashboards_exist() -> None:
    assert _dashboards(), f"no dashboards in {GRAFANA_DASHBOARDS}"


@pytest.mark.parametrize("path", _dashboards(), ids=lambda p: p.name)
def test_dashboard_json_is_valid(path: Path) -> None:
    dashboard = json.loads(path.read_text())
    assert isinstance(dashboard, dict)
    assert isinstance(dashboard.get("title"), str) and dashboard["title"]
    assert isinstance(dashboard.get("panels"), list) and dashboard["panels"]
    ids = [p["id"] for p in _panels(dashboard) if "id" in p]
    assert len(ids) == len(set(ids)), f"duplicate panel ids in {path.name}"


def test_ingestion_dashboard_queries_the_app_metrics() -> None:
    dashboard = json.loads((GRAFANA_DASHBOARDS / "ingestion.json").read_text())
    exprs = " ".join(t.get("expr", "") for p in _panels(dashboard) for t in p.get("targets", []))
    for metric in (
        "durable_rag_chunks_embedded_total",
        "durable_rag_documents_ingested_total",
        "temporal_activity_execution_latency",
    ):
        assert metric in exprs, metric
    assert re.search(r"by \(status\)[^)]*durable_rag_documents_ingested_total", exprs)


def test_dashboards_query_only_metrics_the_code_exports() -> None:
    """Every durable_rag_* name a dashboard queries is a family the code defines."""
    import ragkit.gpu
    import ragkit.metrics

    defined = set(
        re.findall(
            r'"(durable_rag_[a-z0-9_]+)"',
            Path(ragkit.metrics.__file__).read_text() + Path(ragkit.gpu.__file__).read_text(),
        )
    )
    suffixes = ("_bucket", "_sum", "_count", "_total")
    for path in _dashboards():
        for panel in _panels(json.loads(path.read_text())):
            for target in panel.get("targets", []):
                for name in re.findall(r"durable_rag_[a-z0-9_]+", target.get("expr", "")):
                    base = next((name[: -len(s)] for s in suffixes if name.endswith(s)), name)
                    assert base in defined or name in defined, f"{path.name}: {name}"
    service = json.loads((GRAFANA_DASHBOARDS / "service.json").read_text())
    assert service["uid"] == "durable-rag-service"  # the alerts link here


def test_dashboard_queries_are_valid_promql(tmp_path: Path) -> None:
    """Each panel query, with Grafana's variables filled in, must parse as PromQL."""
    exe = _require_tool("promtool", "prometheus")
    substitutions = {
        "$__rate_interval": "5m",
        "$__interval": "1m",
        "$__range": "1h",
    }
    rules = []
    for path in _dashboards():
        for panel in _panels(json.loads(path.read_text())):
            for target in panel.get("targets", []):
                expr = target.get("expr")
                if not expr:
                    continue
                for var, value in substitutions.items():
                    expr = expr.replace(var, value)
                expr = re.sub(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?", ".*", expr)
                rules.append({"record": f"dashboard:check:{len(rules)}", "expr": expr})
    assert rules
    rule_file = tmp_path / "dashboard_rules.yml"
    rule_file.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    _assert_ok(_run([exe, "check", "rules", str(rule_file)]))


def test_grafana_provisioning_parses(services: dict[str, dict[str, Any]]) -> None:
    datasources = yaml.safe_load(
        (GRAFANA_PROVISIONING / "datasources" / "prometheus.yml").read_text()
    )
    assert any(
        d["type"] == "prometheus" and d["url"] == "http://prometheus:9090"
        for d in datasources["datasources"]
    )
    providers = yaml.safe_load((GRAFANA_PROVISIONING / "dashboards" / "dashboards.yml").read_text())
    paths = {p["options"]["path"] for p in providers["providers"]}
    mounts = {
        v.split(":")[1]
        for v in services["grafana"].get("volumes", [])
        if isinstance(v, str) and v.startswith("./deploy/grafana/dashboards")
    }
    assert paths <= mounts, (paths, mounts)


def test_production_temporal_dispatches_and_deletes_as_fast_as_the_dev_server_is_told_to(
    services: dict[str, dict[str, Any]],
) -> None:
    """The dev server's DYNAMIC_CONFIG keys are set in the production dynamic config too, and
    the temporal service loads that file (bench/dispatch.py measures what the setting buys; a
    build's drainage is checked every 30 s there, every second on the dev server)."""
    from durable_rag.stack.temporal import DYNAMIC_CONFIG

    temporal = services["temporal"]
    path = _environment(temporal)["DYNAMIC_CONFIG_FILE_PATH"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in temporal["volumes"]}
    source = ROOT / mounts[f"/etc/temporal/{path}"]
    production = yaml.safe_load(source.read_text())
    assert production["limit.maxIDLength"][0]["value"] == 255  # auto-setup's own default, kept
    for setting in DYNAMIC_CONFIG:
        key, value = setting.split("=")
        if key.endswith("MaxPollRPS"):
            assert production[key][0]["value"] >= 100, key  # the default 20 costs ~50 ms a step
            assert int(value) >= 100
        elif key.startswith("matching.wv.VersionDrainage"):  # the default 3 minutes
            assert production[key][0]["value"] in ("10s", "30s", "60s"), key
            assert value == '"1s"'
        else:  # an ack interval: the default 30 s holds a deleted run's history back as long
            assert key.endswith("UpdateAckInterval"), key
            assert production[key][0]["value"] in ("1s", "2s", "5s"), key
            assert value == '"1s"'  # JSON, as the dev server reads it
