"""ARCHITECTURE.md stays true: it opens with the layers, in the order the import-linter contract
enforces, and every path, module and name it mentions exists."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "ARCHITECTURE.md"
CODE = re.compile(r"`([^`\n]+)`")
PACKAGES = ("bench", "cli", "gateway", "workers", "evals", "durable_rag", "workflows")
PACKAGES += ("activities", "ragkit", "schemas")
DOTTED = re.compile(rf"^(?:{'|'.join(PACKAGES)})(?:\.[A-Za-z_]\w*)+(?:\(\))?$")


def layers_contract() -> list[str]:
    """The packages of the layers contract, top to bottom (siblings in their listed order)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [
        c for c in config["contracts"] if c["type"] == "layers" and "bench" in c["layers"]
    ]
    return [name.strip() for layer in contract["layers"] for name in layer.split("|")]


def test_it_opens_with_the_layers_in_the_contracts_order() -> None:
    text = ARCHITECTURE.read_text()
    sections = re.findall(r"(?m)^## (.+)$", text)
    assert sections[0] == "Layers", sections
    diagram = text.split("## Layers", 1)[1].split("```")[1]
    drawn = re.findall(r"(?m)^\s*([a-z_]+)/\s", diagram)
    assert drawn == layers_contract(), drawn


def defines(source: str, name: str) -> bool:
    return bool(re.search(rf"(?m)^\s*(?:async def|def|class)\s+{name}\b|^\s*{name}\s*[:=]", source))


def name_exists(dotted: str) -> bool:
    """`package.module.Name.attr`: the longest module prefix is a file, and each name after it is
    defined in that file."""
    parts = dotted.removesuffix("()").split(".")
    for cut in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:cut])
        module = (
            base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
        )
        if module.is_file():
            source = module.read_text()
            return all(defines(source, name) for name in parts[cut:])
    return False


def path_exists(token: str) -> bool:
    """A path (globs and <placeholders> allowed), or `path/module.name` for a name in a module."""
    pattern = re.sub(r"<[^>]+>|\{[^}]+\}", "*", token.rstrip("/"))
    if any(ROOT.glob(pattern)):
        return True
    module, _, name = token.rpartition(".")
    source = ROOT / f"{module}.py"
    return bool(module) and source.is_file() and defines(source.read_text(), name)


FILE = re.compile(r"^[\w.*<>-]+\.(?:py|md|json|jsonl|toml|yml|yaml)$|^[\w-]+/$")


def mentioned() -> list[tuple[Path, str]]:
    """(where to look, token) for every code span. In the table of folders, a bare file or
    folder name (`client.py`, `routers/`) is somewhere under its row's folder."""
    found = []
    for line in ARCHITECTURE.read_text().splitlines():
        row = re.match(r"^\| `([\w/]+/)` \|", line)
        where = ROOT / row.group(1) if row else ROOT
        found += [(where, token.strip()) for token in CODE.findall(line)]
    return found


def test_every_path_and_name_it_mentions_exists() -> None:
    paths, names, missing = [], [], []
    for where, token in mentioned():
        if where != ROOT and (FILE.match(token) or re.match(r"^[\w-]+/[\w*<>./-]+$", token)):
            paths.append(token)
            pattern = token.rstrip("/")
            found = any(where.glob(pattern)) or any(where.rglob(pattern)) or path_exists(token)
            if not found:
                missing.append(f"{token} (under {where.relative_to(ROOT)})")
        elif DOTTED.match(token) and not FILE.match(token):
            names.append(token)
            if not name_exists(token):
                missing.append(token)
        elif "/" in token and " " not in token and not token.startswith(("/", ".", "http", "<")):
            paths.append(token)
            if not path_exists(token):
                missing.append(token)
    assert len(paths) >= 80 and len(names) >= 3, (len(paths), len(names))  # the scan works
    assert missing == [], missing


def test_the_checks_reject_what_does_not_exist() -> None:
    assert not path_exists("ragkit/nowhere.py")
    assert not path_exists("ragkit/retrieval.no_such_function")
    assert not name_exists("ragkit.policies.NoSuchTable")
    assert path_exists("ragkit/prompts/<id>.toml") and name_exists("workflows.calls.call")


def test_no_function_in_workflows_or_the_gateway_needs_scrolling() -> None:
    """A flow reads in one place: `run` lists the steps, each step is a method that fits a screen."""
    measured, long = 0, []
    for folder in ("workflows", "gateway"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    measured += 1
                    lines = (node.end_lineno or node.lineno) - node.lineno + 1
                    if lines > 80:
                        long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {lines}")
    assert measured > 100, measured  # the scan works
    assert long == [], long
