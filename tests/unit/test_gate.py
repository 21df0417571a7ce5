"""The gate's list (tests/gate.txt): which test ids it takes, and that each one it names is a
test of the suite, so that a renamed test or parameter cannot drop out of the gate unseen."""
import os
import subprocess
import sys

import pytest

from conftest import PROJECT_ROOT
from gate import gate_entries, in_gate
from trainer.tf_line import installed


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


@pytest.mark.cores(1)
@pytest.mark.skipif(installed().name != "2.14", reason="collects the 2.14 line's tests (Horovod's among them)")
def test_every_listed_id_names_tests_of_the_suite():
    entries = gate_entries()
    files = sorted({test_id.split("::")[0] for test_id, _ in entries})
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0", "-p", "no:cacheprovider",
                           "-m", "gate", *files], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    collected = [line for line in done.stdout.splitlines() if "::" in line]
    unmatched = [test_id for test_id, _ in entries if not any(in_gate(nodeid, [test_id]) for nodeid in collected)]
    assert not unmatched, f"tests/gate.txt names tests the suite does not have: {unmatched}"


def test_the_development_page_has_the_gates_table():
    from gate import markdown_table

    with open(os.path.join(PROJECT_ROOT, "docs", "development.md")) as f:
        page = f.read()
    assert markdown_table() in page, "docs/development.md's gate table is stale: paste tests/gate.py's markdown_table()"
