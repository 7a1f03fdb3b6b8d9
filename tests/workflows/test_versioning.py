"""Every workflow a worker runs declares how its runs meet a new build, in workflows/versioning.py,
and ARCHITECTURE.md's table says the same; versioned workers apply it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from temporalio import workflow
from temporalio.common import VersioningBehavior

from ragkit.settings import Settings
from workers.build import deployment_config
from workers.orchestrator import LIVE_WORKFLOWS, WORKFLOWS
from workflows.versioning import BEHAVIOURS, WORKER_DEFAULT

ROOT = Path(__file__).resolve().parents[2]
NAMES = {VersioningBehavior.PINNED: "pinned", VersioningBehavior.AUTO_UPGRADE: "auto-upgrade"}


def registered() -> dict[str, workflow._Definition]:
    return {
        (d := workflow._Definition.must_from_class(cls)).name: d
        for cls in {*WORKFLOWS, *LIVE_WORKFLOWS}
    }


def test_every_workflow_declares_its_behaviour_with_a_reason() -> None:
    assert set(BEHAVIOURS) == set(registered())
    assert all(why.strip() for _, why in BEHAVIOURS.values())


def test_versioned_workers_apply_the_table_and_no_decorator_overrides_it() -> None:
    """A behaviour on a `@workflow.defn` would make the server refuse every task of an
    unversioned worker (the tests'): the table's one behaviour is the workers' default."""
    assert {behaviour for behaviour, _ in BEHAVIOURS.values()} == {WORKER_DEFAULT}
    config = deployment_config(Settings(), "orchestrator")
    assert config is not None and config.default_versioning_behavior == WORKER_DEFAULT
    for name, definition in registered().items():
        assert definition.versioning_behavior == VersioningBehavior.UNSPECIFIED, name


def test_architectures_table_gives_each_workflows_behaviour_and_reason() -> None:
    text = (ROOT / "ARCHITECTURE.md").read_text()
    section = text.split("### Versioned workers", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| ([\w-]+)[^|]* \| (.+) \|$", section, re.M)
    assert {name: (behaviour, why) for name, behaviour, why in rows} == {
        name: (NAMES[behaviour], why) for name, (behaviour, why) in BEHAVIOURS.items()
    }


def test_the_long_runs_continue_as_new_onto_the_current_build() -> None:
    """Pinned runs that last long move at continue-as-new: each such call names the behaviour
    of the next run, and the run also continues as new once a new build is current."""
    for module in ("conversation", "ingest"):
        source = (ROOT / "workflows" / f"{module}.py").read_text()
        calls = [
            node
            for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "continue_as_new"
        ]
        assert calls, module
        for call in calls:
            keywords = {k.arg: ast.unparse(k.value) for k in call.keywords}
            assert keywords.get("initial_versioning_behavior") == "NEXT_RUN_ON_CURRENT_BUILD"
        assert "new_build_is_current()" in source, module
