"""The gate (`./build.sh test`): its slow tests are listed in tests/gate.txt with the
capability each stands for; this marks them `gate`, so that `-m "gate or not slow"` selects
the gate and `-m "slow and not gate"` the rest (`./build.sh test-all`)."""
from __future__ import annotations

import os

import pytest

from lines import keep_this_lines_tests

GATE_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gate.txt")
SEPARATOR = " | "


def gate_entries(path: str = GATE_FILE) -> list[tuple[str, str]]:
    """(test id, capability) for each line of the gate file."""
    entries = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip() or line.startswith("#"):
                continue
            if SEPARATOR not in line:
                raise ValueError(f"{path} line {number}: 'TEST ID | CAPABILITY' expected, got {line.strip()!r}")
            test_id, capability = line.rstrip("\n").split(SEPARATOR, 1)
            entries.append((test_id.strip(), capability.strip()))
    return entries


def in_gate(nodeid: str, test_ids) -> bool:
    """A listed id names a file, a test (all its params) or one parametrized case."""
    return any(nodeid == test_id or nodeid.startswith(test_id + "[") or nodeid.startswith(test_id + "::")
               for test_id in test_ids)


@pytest.hookimpl(tryfirst=True)  # before -m deselects by markers
def pytest_collection_modifyitems(config, items):
    test_ids = [test_id for test_id, _ in gate_entries()]
    for item in items:
        if in_gate(item.nodeid, test_ids):
            item.add_marker(pytest.mark.gate)
    keep_this_lines_tests(config, items)


def runs_on(test_id: str, lines_by_nodeid: dict[str, tuple[str, ...]]) -> str:
    """Where a gate test runs: the 2.14 line's environment, the 2.21 line's, both (its
    `line` marker: tests/lines.py), or the containers (Docker Engine; the images of both lines)."""
    if test_id.startswith("tests/container/"):
        return "Docker Engine"
    lines = {line for nodeid, its in lines_by_nodeid.items() if in_gate(nodeid, [test_id]) for line in its}
    return ", ".join(sorted(lines))


def markdown_table(lines_by_nodeid: dict[str, tuple[str, ...]]) -> str:
    """docs/development.md's table of the gate's slow tests, given each collected test's lines
    (tests/unit/test_gate.py collects them and checks that the page has the table)."""
    rows = ["| Capability | Test | Runs on |", "|---|---|---|"]
    for test_id, capability in gate_entries():
        rows.append(f"| {capability} | `{test_id}` | {runs_on(test_id, lines_by_nodeid)} |")
    return "\n".join(rows)
