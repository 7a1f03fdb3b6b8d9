"""A worker's build (workers/build.py, ragkit/deployments.py): the same id for the same workflow
code, another for a change to anything a workflow's commands depend on, the same for a change to
activities alone; one deployment per worker kind."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ragkit import deployments
from ragkit.settings import Settings
from workers import build

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for folder in ("workflows", "schemas", "ragkit", "activities"):
        shutil.copytree(
            ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__")
        )
    return tmp_path


def edit(path: Path) -> None:
    path.write_text(path.read_text() + "\n# changed\n")


def test_the_same_workflow_code_has_the_same_build_id(tree: Path) -> None:
    assert deployments.computed_build_id(tree) == deployments.computed_build_id(ROOT)
    assert deployments.computed_build_id(ROOT).startswith("0.1.0-")


@pytest.mark.parametrize(
    "changed",
    [
        "workflows/answer.py",  # a workflow
        "schemas/answer.py",  # a contract a workflow carries
        "ragkit/ids.py",  # what names a workflow's children
        "ragkit/settings/serving.py",  # imported on the way (ragkit.policies -> settings)
    ],
)
def test_a_change_a_workflow_depends_on_is_another_build(tree: Path, changed: str) -> None:
    before = deployments.computed_build_id(tree)
    edit(tree / changed)
    assert deployments.computed_build_id(tree) != before


def test_a_change_to_activities_alone_keeps_the_build(tree: Path) -> None:
    """Runs never replay an activity: old runs' activities go to the current LLM and index
    builds anyway (ARCHITECTURE.md, *Versioned workers*)."""
    before = deployments.computed_build_id(tree)
    edit(tree / "activities" / "inference.py")
    assert deployments.computed_build_id(tree) == before
    assert not any(p.parts[-2] == "activities" for p in deployments.workflow_sources(ROOT))


def test_each_kind_has_its_deployment_and_a_set_build_id_wins() -> None:
    settings = Settings(worker_build_id="v42", worker_deployment_name="rag")
    assert build.build_id(Settings()) == deployments.computed_build_id()
    config = build.deployment_config(settings, "llm")
    assert config is not None and config.use_worker_versioning
    assert (config.version.deployment_name, config.version.build_id) == ("rag-llm", "v42")
    assert build.deployment_name(settings, "orchestrator") == "rag-orchestrator"
    with pytest.raises(ValueError, match="unknown worker kind"):
        build.deployment_name(settings, "gateway")
    assert build.deployment_config(Settings(worker_versioning=False), "llm") is None


def test_a_build_id_with_characters_temporal_does_not_take_is_refused() -> None:
    with pytest.raises(ValueError, match="build_id"):
        Settings(worker_build_id="has space")
