"""What the suite spends, by module and by tier, printed at the end of every run.

`--durations` charges a module-scoped fixture to the test that first asks for it, so it ranks
modules by accident. This plugin adds every phase (setup, call, teardown) of every test to its
module, so a module's total includes its fixtures. A session-scoped fixture (the Postgres and
Temporal servers, the embedder, the vLLM engine) is still charged to the first module that asks
for it: the table names which module paid for each.

The totals also go to `$DURABLE_RAG_TEST_TIMES` (default `.data/test-times.json`), for comparing runs.
`make test` runs the unit and workflow tiers first, on every CPU (pytest-xdist), then the rest in
one process; the second run names the first's file in `$DURABLE_RAG_TEST_TIMES_BEFORE`, so its
table is the whole suite's. Under xdist a test's tier travels in its report (user_properties),
since only the workers collect.
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

TIERS = ("unit", "workflow", "integration", "e2e")


def tier_of(item: pytest.Item) -> str:
    """A test's tier: its tier mark, else `integration` for a test that needs services."""
    for tier in reversed(TIERS):  # the most expensive mark wins
        if item.get_closest_marker(tier) is not None:
            return tier
    return "integration" if item.get_closest_marker("integration") else "unit"


class Timings:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.tests: dict[str, int] = defaultdict(int)
        self.tier: dict[str, str] = {}
        self.outcomes: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.session_fixtures: dict[str, str] = {}
        self.slow: set[str] = set()
        self.current = ""  # the test being run: a session fixture set up now is charged to it
        self.started = time.monotonic()

    @staticmethod
    def module(nodeid: str) -> str:
        return nodeid.split("::", 1)[0]

    def add(self, report: pytest.TestReport) -> None:
        module = self.module(report.nodeid)
        properties = dict(report.user_properties)
        if "tier" in properties:
            self.note(module, str(properties["tier"]), bool(properties.get("slow")))
        for name, text in properties.items():
            if name.startswith(SESSION_FIXTURE):  # set up here or in an xdist worker
                self.session_fixtures[name.removeprefix(SESSION_FIXTURE)] = str(text)
        self.seconds[module] += report.duration
        if report.when == "call" or (report.when == "setup" and not report.passed):
            self.tests[module] += 1
            self.outcomes[module][report.outcome] += 1

    def rows(self) -> list[tuple[str, str, int, float]]:
        return sorted(
            ((m, self.tier.get(m, "unit"), self.tests[m], s) for m, s in self.seconds.items()),
            key=lambda row: -row[3],
        )

    def tiers(self) -> dict[str, tuple[int, int, float]]:
        totals: dict[str, list[float]] = {t: [0, 0, 0.0] for t in TIERS}
        for _, tier, tests, seconds in self.rows():
            totals[tier][0] += 1
            totals[tier][1] += tests
            totals[tier][2] += seconds
        return {t: (int(v[0]), int(v[1]), v[2]) for t, v in totals.items() if v[0]}

    def note(self, module: str, tier: str, slow: bool) -> None:
        if slow:
            self.slow.add(module)
        if TIERS.index(tier) >= TIERS.index(self.tier.get(module, "unit")):
            self.tier[module] = tier  # a module's tier is its most expensive test's

    def include(self, path: Path) -> float:
        """Add an earlier run's modules (its JSON file); returns that run's wall clock."""
        earlier = json.loads(path.read_text())
        for row in earlier["modules"]:
            module = row["module"]
            self.note(module, row["tier"], row["slow"])
            self.seconds[module] += row["seconds"]
            self.tests[module] += row["tests"]
        return float(earlier["wall_seconds"])


_timings = Timings()
SESSION_FIXTURE = "session fixture "
# Session fixtures set up for the running test, not yet in one of its reports: they reach the
# table only through reports, the one path that works under xdist too (its workers set them up,
# its controller prints the table).
_unreported: list[tuple[str, str]] = []


@pytest.hookimpl(trylast=True)  # after conftest's hook has given every test its tier mark
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        tier, slow = tier_of(item), item.get_closest_marker("slow") is not None
        _timings.note(Timings.module(item.nodeid), tier, slow)
        item.user_properties += [("tier", tier), ("slow", slow)]


def pytest_runtest_logstart(nodeid: str) -> None:
    _timings.current = nodeid


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _timings.add(report)


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[object]):  # type: ignore[no-untyped-def]
    started = time.monotonic()
    yield
    if fixturedef.scope == "session":
        seconds = time.monotonic() - started
        if seconds >= 1.0:
            text = f"{seconds:.1f} s, charged to {Timings.module(_timings.current) or '?'}"
            worker = os.environ.get("PYTEST_XDIST_WORKER")
            name = f"{fixturedef.argname} ({worker})" if worker else fixturedef.argname
            _unreported.append((SESSION_FIXTURE + name, text))  # to the table through a report


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item) -> Any:
    item.user_properties += _unreported
    _unreported.clear()
    yield


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    before = os.environ.get("DURABLE_RAG_TEST_TIMES_BEFORE")
    earlier_wall = _timings.include(Path(before)) if before and Path(before).exists() else 0.0
    rows = _timings.rows()
    if not rows:
        return
    write = terminalreporter.write_line
    terminalreporter.section("time by module (setup, call and teardown)")
    write(f"{'seconds':>9}  {'tier':<12} {'tests':>5}  module (* marked slow)")
    for module, tier, tests, seconds in rows:
        star = " *" if module in _timings.slow else ""
        write(f"{seconds:9.1f}  {tier:<12} {tests:5d}  {module}{star}")
    terminalreporter.section("time by tier")
    write(f"{'seconds':>9}  {'tier':<12} {'tests':>5}  modules")
    total = 0.0
    for tier, (modules, tests, seconds) in _timings.tiers().items():
        total += seconds
        write(f"{seconds:9.1f}  {tier:<12} {tests:5d}  {modules}")
    write(f"{total:9.1f}  {'all':<12} {sum(r[2] for r in rows):5d}  {len(rows)}")
    wall = time.monotonic() - _timings.started + earlier_wall
    if earlier_wall:
        write(f"wall clock: {wall:.1f} s ({earlier_wall:.1f} s of it in the run before, {before})")
    else:
        write(f"wall clock of the session: {wall:.1f} s")
    if _timings.session_fixtures:
        write("session fixtures over 1 s (their time is in the module that first asked):")
        for name, text in sorted(_timings.session_fixtures.items()):
            write(f"  {name}: {text}")
    path = Path(os.environ.get("DURABLE_RAG_TEST_TIMES", ".data/test-times.json"))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            json.dumps(
                {
                    "wall_seconds": round(wall, 1),
                    "modules": [
                        {
                            "module": m,
                            "tier": t,
                            "tests": n,
                            "seconds": round(s, 2),
                            "slow": m in _timings.slow,
                        }
                        for m, t, n, s in rows
                    ],
                    "tiers": {
                        t: {"modules": m, "tests": n, "seconds": round(s, 1)}
                        for t, (m, n, s) in _timings.tiers().items()
                    },
                    "session_fixtures": _timings.session_fixtures,
                },
                indent=1,
            )
        )
    except OSError as error:
        write(f"could not write {path}: {error}")
