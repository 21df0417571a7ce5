"""The gate (`./build.sh test`): its slow tests are listed in tests/gate.txt with the
capability each stands for; this marks them `gate`, so that `-m "gate or not slow"` selects
the gate and `-m "slow and not gate"` the rest (`./build.sh test-all`)."""
from __future__ import annotations

import os

import pytest

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


LINE_TIER_FILE = os.path.join(os.path.dirname(GATE_FILE), "line_2.21_tier.txt")
ONLY_ON_2_21 = "tests/integration/test_line_2_21"  # its files' tests skip themselves on the 2.14 line


def runs_on(test_id: str, line_tier: list[str]) -> str:
    """Where a gate test runs: the 2.14 line's environment, the 2.21 line's, both, or the
    containers (Docker Engine; the images of both lines)."""
    if test_id.startswith("tests/container/"):
        return "Docker Engine"
    on_2_21 = any(in_gate(test_id, [listed]) for listed in line_tier)
    if test_id.startswith(ONLY_ON_2_21):
        return "2.21"
    return "2.14, 2.21" if on_2_21 else "2.14"


def markdown_table() -> str:
    """docs/development.md's table of the gate's slow tests (tests/unit/test_gate.py checks
    that the page has it)."""
    with open(LINE_TIER_FILE) as f:
        line_tier = [line.strip() for line in f if line.strip() and not line.startswith("#")]
    rows = ["| Capability | Test | Runs on |", "|---|---|---|"]
    for test_id, capability in gate_entries():
        rows.append(f"| {capability} | `{test_id}` | {runs_on(test_id, line_tier)} |")
    return "\n".join(rows)
