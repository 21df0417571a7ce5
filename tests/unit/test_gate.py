"""The gate's list (tests/gate.txt): which test ids it takes, and that each one it names is a
test of the suite, so that a renamed test or parameter cannot drop out of the gate unseen."""
import os
import subprocess
import sys

import pytest

from conftest import PROJECT_ROOT
from gate import gate_entries, in_gate
from lines import RECORD_ENV


@pytest.mark.parametrize("nodeid, listed, expected", [
    ("tests/a.py::test_x", ["tests/a.py::test_x"], True),
    ("tests/a.py::test_x[File]", ["tests/a.py::test_x"], True),  # a test without [params]: all of them
    ("tests/a.py::test_x[File]", ["tests/a.py::test_x[Pipe]"], False),
    ("tests/a.py::test_x_and_more", ["tests/a.py::test_x"], False),  # not a prefix of another name
    ("tests/a.py::test_x", ["tests/a.py"], True),  # a file: every test in it
    ("tests/ab.py::test_x", ["tests/a"], False),
    ("tests/a.py::test_x", [], False),
])
def test_which_tests_a_listed_id_takes(nodeid, listed, expected):
    assert in_gate(nodeid, listed) is expected


def test_a_line_without_its_capability_is_an_error_naming_the_line(tmp_path):
    listed = tmp_path / "gate.txt"
    listed.write_text("# a comment\ntests/a.py::test_x | what it stands for\ntests/a.py::test_y\n")
    with pytest.raises(ValueError, match=r"gate\.txt line 3: 'TEST ID \| CAPABILITY' expected"):
        gate_entries(str(listed))


def test_every_entry_says_what_it_stands_for():
    entries = gate_entries()
    assert len(entries) >= 30
    assert all(test_id.startswith("tests/") and len(capability) > 10 for test_id, capability in entries), entries
    assert len({test_id for test_id, _ in entries}) == len(entries), "an id listed twice"


@pytest.fixture(scope="module")
def gate_tests_and_their_lines(tmp_path_factory) -> dict[str, tuple[str, ...]]:
    """Every test of the files tests/gate.txt names, collected as a run collects them, with the
    lines its `line` marker gives it (tests/lines.py), on whichever line runs it."""
    record = tmp_path_factory.mktemp("lines") / "lines.tsv"
    files = sorted({test_id.split("::")[0] for test_id, _ in gate_entries()})
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0", "-p", "no:cacheprovider",
                           "-m", "", *files], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", RECORD_ENV: str(record)})
    assert done.returncode in (0, 5), done.stdout[-3000:] + done.stderr[-3000:]  # 5: every test deselected
    return {nodeid: tuple(lines.split(",")) for nodeid, lines in
            (row.split("\t") for row in record.read_text().splitlines())}


@pytest.mark.cores(1)
def test_every_listed_id_names_tests_of_the_suite(gate_tests_and_their_lines):
    unmatched = [test_id for test_id, _ in gate_entries()
                 if not any(in_gate(nodeid, [test_id]) for nodeid in gate_tests_and_their_lines)]
    assert not unmatched, f"tests/gate.txt names tests the suite does not have: {unmatched}"


@pytest.mark.cores(1)
def test_the_development_page_has_the_gates_table(gate_tests_and_their_lines):
    from gate import markdown_table

    with open(os.path.join(PROJECT_ROOT, "docs", "development.md")) as f:
        page = f.read()
    assert markdown_table(gate_tests_and_their_lines) in page, \
        "docs/development.md's gate table is stale: paste tests/gate.py's markdown_table()"


class Collected:
    """What lines_of reads of a collected test: its id and its closest `line` marker."""

    def __init__(self, nodeid, marked=None):
        self.nodeid, self.marked = nodeid, marked

    def get_closest_marker(self, name):
        return None if self.marked is None else pytest.mark.line(*self.marked).mark


@pytest.mark.parametrize("nodeid, marked, lines", [
    ("tests/unit/test_planner.py::test_plan", None, ("2.14", "2.21")),  # a unit test: both lines
    ("tests/integration/test_modes.py::test_x", None, ("2.14",)),  # any other test: 2.14
    ("tests/container/test_image.py::test_x", None, ("2.14",)),  # run from the 2.14 environment
    ("tests/integration/test_x.py::test_x", ("2.21",), ("2.21",)),
    ("tests/unit/test_x.py::test_x", ("2.14",), ("2.14",)),  # a marker wins
])
def test_which_lines_a_test_runs_on(nodeid, marked, lines):
    from lines import lines_of

    assert lines_of(Collected(nodeid, marked)) == lines


@pytest.mark.parametrize("nodeid, lines", [
    ("tests/integration/test_modes.py::test_horovod_two_ranks_pipe_mode", ("2.14",)),  # unmarked: 2.14
    ("tests/integration/test_line_2_21.py::test_a_horovod_script_on_two_ranks", ("2.21",)),  # its module's mark
    ("tests/integration/test_cluster.py::test_multi_worker_mirrored_on_two_hosts", ("2.14", "2.21")),  # its own
])
def test_a_test_runs_on_the_lines_its_marker_names(gate_tests_and_their_lines, nodeid, lines):
    found = {its for collected, its in gate_tests_and_their_lines.items() if in_gate(collected, [nodeid])}
    assert found == {lines}, found
