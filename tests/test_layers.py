"""The layers hold: import-linter's contracts (pyproject.toml, run by `make test`) pass on the
tree, and fail the moment the base library imports anything above it.

The contracts are only worth something if they can fail, so each case copies the packages to a
scratch folder, adds one import that breaks a layer, and runs `lint-imports` on the copy.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
PACKAGES = (
    "bench",
    "cli",
    "gateway",
    "workers",
    "evals",
    "durable_rag",
    "workflows",
    "activities",
    "ragkit",
    "schemas",
)


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    # The copy first on the path: the project's editable install would win otherwise.
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    copy = tmp_path_factory.mktemp("layers")
    shutil.copy(ROOT / "pyproject.toml", copy)
    for package in PACKAGES:
        shutil.copytree(
            ROOT / package, copy / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    yield copy


def test_the_tree_keeps_every_contract(tree: Path) -> None:
    result = lint_imports(tree)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("above", "layer"),
    [
        ("workflows.calls", "workflows"),
        ("workers.common", "workers"),
        ("activities.documents", "activities"),
        ("gateway.app", "gateway"),
        ("durable_rag.client", "durable_rag"),
        ("cli", "cli"),
    ],
)
def test_an_import_from_the_base_library_upwards_breaks_the_layers(
    tree: Path, above: str, layer: str
) -> None:
    module = tree / "ragkit" / "ids.py"
    original = module.read_text()
    module.write_text(original + f"\nimport {above}  # noqa: E402, F401\n")
    try:
        result = lint_imports(tree)
    finally:
        module.write_text(original)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"ragkit is not allowed to import {layer}" in result.stdout, result.stdout
    assert f"ragkit.ids -> {above}" in result.stdout, result.stdout
