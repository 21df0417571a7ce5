"""Which TensorFlow line a test runs on: the marker `line` names them
(`@pytest.mark.line("2.14", "2.21")`, on a test, a parametrized case or a module's
`pytestmark`); unmarked, the unit tests run on both lines and every other test on the 2.14
line. A run deselects what is not for its environment's line (`./build.sh test` runs both:
the 2.14 line's environment, and the 2.21 line's beside it).

What runs on 2.21 besides the unit tests: the line's own tests (Keras 3 scripts, the Keras 2
switch, PipeModeDataset, Horovod built for it, the built-in model's eval AUC against the 2.14
line's in every mode), and one test of each kind of job the line shares with 2.14 (File and
Pipe mode, replicas in one process, multi-worker mirrored and local SGD on two hosts, a data
group, `trainer.kit`'s channel per rank, click logs as CSV, TSV and Parquet on one host and
two, the benchmarks of CPU settings and scripts). The 2.21
image's own tests are container tests (tests/container/test_line_2_21_image.py)."""
from __future__ import annotations

import os

from trainer.tf_line import installed

BOTH = ("2.14", "2.21")
ON_2_21 = ("2.21",)
# A file to write every collected test and its lines to (tests/unit/test_gate.py reads it).
RECORD_ENV = "TRAINER_TEST_LINES"


def lines_of(item) -> tuple[str, ...]:
    marker = item.get_closest_marker("line")
    if marker is not None:
        return tuple(marker.args)
    return BOTH if item.nodeid.startswith("tests/unit/") else ("2.14",)


def keep_this_lines_tests(config, items) -> None:
    """Deselect the tests that do not run on this environment's line."""
    here = installed().name
    record = os.environ.get(RECORD_ENV)
    if record:
        with open(record, "a") as f:
            f.writelines(f"{item.nodeid}\t{','.join(lines_of(item))}\n" for item in items)
    elsewhere = [item for item in items if here not in lines_of(item)]
    if elsewhere:
        config.hook.pytest_deselected(items=elsewhere)
        items[:] = [item for item in items if here in lines_of(item)]
