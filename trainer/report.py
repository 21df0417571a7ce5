"""What the job leaves behind for SageMaker and the user: success/failure files, metrics."""
from __future__ import annotations

import json
import logging
import os
import traceback

log = logging.getLogger(__name__)

# For the estimator's metric_definitions: what the training log prints, and how to pick it up.
METRIC_DEFINITIONS = [
    {"Name": "train:samples_per_sec", "Regex": r"samples/sec=([0-9.]+)"},
    {"Name": "train:loss", "Regex": r"train_loss=([0-9.]+)"},
    {"Name": "eval:auc", "Regex": r"eval_auc=([0-9.]+)"},
    {"Name": "eval:logloss", "Regex": r"eval_logloss=([0-9.]+)"},
]


def write_failure(output_dir: str, reason: str, detail: str = "") -> str:
    """Write `output/failure`: the reason first (what SageMaker shows), details after."""
    os.makedirs(output_dir, exist_ok=True)
    text = reason.strip() + "\n"
    if detail:
        text += "\n" + detail
    path = os.path.join(output_dir, "failure")
    with open(path, "w") as f:
        f.write(text)
    return path


def write_success(output_dir: str) -> None:
    os.makedirs(output_dir, exist_ok=True)
    with open(os.path.join(output_dir, "success"), "w") as f:
        f.write("")


def clear_status(output_dir: str) -> None:
    for name in ("success", "failure"):
        try:
            os.remove(os.path.join(output_dir, name))
        except FileNotFoundError:
            pass


def write_metrics(output_data_dir: str, metrics: dict) -> str:
    os.makedirs(output_data_dir, exist_ok=True)
    path = os.path.join(output_data_dir, "metrics.json")
    with open(path, "w") as f:
        json.dump(metrics, f, indent=2, sort_keys=True)
    return path


def failure_from_exception(output_dir: str, err: BaseException, reason: str) -> None:
    detail = "".join(traceback.format_exception(type(err), err, err.__traceback__))
    path = write_failure(output_dir, reason, detail)
    log.error("job failed: %s (written to %s)", reason, path)
