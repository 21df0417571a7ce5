"""What the job leaves behind for SageMaker and the user: success/failure files, metrics."""
from __future__ import annotations

import fcntl
import json
import logging
import os
import traceback

log = logging.getLogger(__name__)

# For the estimator's metric_definitions: what the training log prints, and how to pick it up.
METRIC_DEFINITIONS = [
    {"Name": "train:samples_per_sec", "Regex": r"samples/sec=([0-9.]+)"},
    {"Name": "train:samples_per_dollar", "Regex": r"samples/\$=([0-9.]+)"},
    {"Name": "train:loss", "Regex": r"train_loss=([0-9.]+)"},
    {"Name": "eval:auc", "Regex": r"eval_auc=([0-9.]+)"},
    {"Name": "eval:logloss", "Regex": r"eval_logloss=([0-9.]+)"},
]


# The failure file's sections: the cause (the job's own reason, or the user's text) first,
# then what else failed.
LATER = "\n--- a later failure ---\n"
# Below the text a user's script or hook wrote itself: the container's own account of it.
CONTAINER_SAW = "\n--- what the container saw ---\n"

# Beside the failure file, the texts this package wrote into it (each process of a host
# writes there), which tells them from the text a user's script wrote into the same file.
OURS_SUFFIX = ".trainer.json"


def write_failure(output_dir: str, reason: str, detail: str = "", cause_first: bool = False) -> str:
    """Write `output/failure`: the reason first (what SageMaker shows), details after.

    In a job of several processes the first failure is the cause and stays first; later
    ones (often consequences) are appended below it. `cause_first`: this reason is known
    to be the cause (a launcher naming the process that died first) and goes above them.
    Text that a user's script or hook wrote to the file itself (as SageMaker documents)
    stays first and whole above all of ours, as AWS's toolkit leaves it: the user's own
    words are what SageMaker shows as the job's FailureReason.
    """
    os.makedirs(output_dir, exist_ok=True)
    text = reason.strip() + "\n" + (f"\n{detail}" if detail else "")
    path = os.path.join(output_dir, "failure")
    # The host's processes may fail at once: one rewrite at a time, so that no cause is lost.
    with open(path + OURS_SUFFIX, "a+") as record:
        fcntl.flock(record, fcntl.LOCK_EX)
        record.seek(0)
        try:
            ours = json.loads(record.read() or "[]")
        except ValueError:
            ours = []
        try:
            with open(path) as f:
                users = _users_part(f.read(), ours).strip()
        except FileNotFoundError:
            users = ""
        ours = [text] + ours if cause_first else ours + [text]
        with open(path + ".new", "w") as f:  # readers of the first line never see it half-written
            f.write((users + "\n" + CONTAINER_SAW if users else "") + LATER.join(ours))
        os.replace(path + ".new", path)
        record.truncate(0)
        json.dump(ours, record)
    return path


def _users_part(content: str, ours: list[str]) -> str:
    """What is left of the failure file without our texts and separators: the user's."""
    for text in ours:
        content = content.replace(text, "", 1)
    for separator in (CONTAINER_SAW, LATER):
        content = content.replace(separator, "")
    return content


class AlreadyReported(Exception):
    """A failure some process already wrote to the failure file; only the exit code is left."""

    def __init__(self, exit_code: int):
        super().__init__(f"exit code {exit_code}")
        self.exit_code = exit_code


def write_success(output_dir: str) -> None:
    os.makedirs(output_dir, exist_ok=True)
    with open(os.path.join(output_dir, "success"), "w") as f:
        f.write("")


def clear_status(output_dir: str) -> None:
    for name in ("success", "failure", "failure" + OURS_SUFFIX):
        try:
            os.remove(os.path.join(output_dir, name))
        except FileNotFoundError:
            pass


def metrics_path(output_data_dir: str) -> str:
    """Where the chief writes the job's metrics (output/data/metrics.json)."""
    return os.path.join(output_data_dir, "metrics.json")


def read_metrics(output_data_dir: str) -> dict | None:
    path = metrics_path(output_data_dir)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def write_metrics(output_data_dir: str, metrics: dict) -> str:
    os.makedirs(output_data_dir, exist_ok=True)
    path = metrics_path(output_data_dir)
    with open(path, "w") as f:
        json.dump(metrics, f, indent=2, sort_keys=True)
    return path


def failure_from_exception(output_dir: str, err: BaseException, reason: str) -> None:
    detail = "".join(traceback.format_exception(type(err), err, err.__traceback__))
    path = write_failure(output_dir, reason, detail)
    log.error("job failed: %s (written to %s)", reason, path)


EXIT_JOB_ERROR = 1
EXIT_INTERNAL_ERROR = 2
EXIT_STALLED = 3  # the progress watchdog ended a process that made no progress
EXIT_STOPPED = 143  # stopped by SIGTERM (128 + 15, the shell's convention), state saved
# How long a stopped process may take to reach a step boundary and save: under the two
# minutes SageMaker leaves between a spot interruption's notice and the end.
STOP_GRACE_SEC = 100.0


def report_failures(output_dir: str, work, who: str = "") -> int:
    """Run `work()`; turn an exception into the failure file (reason first) and an exit code.

    `who` names the process in a job of several ("rank 1 on algo-1"), so the reason says
    which one failed; a callable is asked when a failure happens (the name may only be
    known once the job's configuration has been read).
    """
    from trainer.errors import JobError, PeerLost, Stopped

    def prefix() -> str:
        name = who() if callable(who) else who
        return f"{name}: " if name else ""

    try:
        work()
    except AlreadyReported as err:
        return err.exit_code
    except Stopped as err:  # not a failure of the job's own, but SageMaker reads the file's reason
        if err.reported:
            write_failure(output_dir, str(err))
        log.warning("%s", err)
        return EXIT_STOPPED
    except PeerLost as err:  # a consequence: the message says of what
        failure_from_exception(output_dir, err, str(err))
        return EXIT_JOB_ERROR
    except JobError as err:
        failure_from_exception(output_dir, err, prefix() + str(err))
        return EXIT_JOB_ERROR
    except Exception as err:  # anything else is still reported, reason first
        failure_from_exception(output_dir, err, f"{prefix()}{type(err).__name__}: {err}")
        return EXIT_INTERNAL_ERROR
    return 0
