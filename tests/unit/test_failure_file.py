"""The failure file SageMaker shows the first 1,024 characters of: the cause first, the
consequences below it, and a user's own text (a script or hook that wrote the file itself)
first and whole above everything the container adds."""
import os
import threading

import pytest

from trainer.report import clear_status, write_failure

USERS = "the input bucket holds no file for 2026-11-26\n"

# (what is written, in order: ("user", text) or (reason, cause_first)), the file's sections in order
CASES = [
    ("ours alone", [("rank 1 failed", False)], ["rank 1 failed"]),
    ("a later failure goes below", [("rank 1 failed", False), ("rank 0 lost rank 1", False)],
     ["rank 1 failed", "--- a later failure ---", "rank 0 lost rank 1"]),
    ("the cause goes above the consequences", [("rank 0 lost rank 1", False), ("rank 1 died first", True)],
     ["rank 1 died first", "--- a later failure ---", "rank 0 lost rank 1"]),
    ("the user's text stays first, ours below it",
     [("user", USERS), ("script train.py (rank 0 on algo-1) exited with code 1", True)],
     [USERS.strip(), "--- what the container saw ---", "script train.py (rank 0 on algo-1) exited with code 1"]),
    ("the user's text above a consequence written before it",
     [("rank 1 lost its peer", False), ("user", USERS), ("rank 0 exited with code 1", True)],
     [USERS.strip(), "--- what the container saw ---", "rank 0 exited with code 1", "--- a later failure ---",
      "rank 1 lost its peer"]),
]


def write(output_dir, steps):
    for what, how in steps:
        if what == "user":  # as a script does: its own open(), over whatever is there
            with open(os.path.join(output_dir, "failure"), "w") as f:
                f.write(how)
        else:
            write_failure(str(output_dir), what, cause_first=how)


@pytest.mark.parametrize("steps, sections", [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_the_failure_file_puts_the_cause_first(tmp_path, steps, sections):
    write(tmp_path, steps)
    text = (tmp_path / "failure").read_text()
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines == sections, text


def test_the_user_s_text_and_our_first_line_fit_in_what_sagemaker_shows(tmp_path):
    write(tmp_path, [("user", USERS), ("script train.py (rank 0 on algo-1) exited with code 1: ValueError: x", True)])
    shown = (tmp_path / "failure").read_text()[:1024]
    assert shown.startswith(USERS) and "exited with code 1: ValueError: x" in shown, shown


def test_a_new_job_starts_from_an_empty_record(tmp_path):
    """A resumed job's failure file holds only its own run's text, a user's too."""
    write(tmp_path, [("rank 1 failed", False)])
    clear_status(str(tmp_path))
    assert os.listdir(tmp_path) == []
    write(tmp_path, [("user", USERS), ("rank 0 exited", True)])
    assert (tmp_path / "failure").read_text().startswith(USERS)
    assert "rank 1 failed" not in (tmp_path / "failure").read_text()


def test_processes_failing_at_once_lose_no_text(tmp_path):
    """Every rank of a host may write at the same moment: each text is kept, once."""
    reasons = [f"rank {i} failed" for i in range(16)]
    threads = [threading.Thread(target=write_failure, args=(str(tmp_path), reason)) for reason in reasons]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    text = (tmp_path / "failure").read_text()
    assert sorted(line for line in text.splitlines() if line.startswith("rank")) == sorted(reasons), text
