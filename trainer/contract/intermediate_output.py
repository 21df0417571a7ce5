"""`output/intermediate` synced to S3 while the job runs, and waited for at its end.

The syncing is the SageMaker training toolkit's (its `intermediate_output`: a process that
uploads each file as it is closed, and ends by itself one pass after `output/success` or
`output/failure` appears, once its uploads are done). `train` ends with `os._exit`, which
would leave that process's last uploads behind: `wait` gives it a bounded time first.
"""
from __future__ import annotations

import logging
import os
import time

log = logging.getLogger("trainer")
# Bounded: within SageMaker's two minutes after a stop, with the script's own grace before it.
UPLOAD_WAIT_SEC = 60.0
_sync = None  # the toolkit's sync process, when one was started


def start(toolkit_env) -> None:
    """Sync output/intermediate where the job says where its output goes (on SageMaker, and
    locally when the hyperparameter sagemaker_s3_output is set)."""
    global _sync
    from sagemaker_training import intermediate_output

    region = os.environ.get("AWS_REGION", os.environ.get("SAGEMAKER_REGION"))  # as the toolkit's trainer
    try:
        _sync = intermediate_output.start_sync(toolkit_env.sagemaker_s3_output(), region)
    except Exception as err:  # no S3 here (local mode): training goes on without it
        log.warning("output/intermediate will not be synced: %s: %s", type(err).__name__, err)
    if _sync is not None:
        log.info("output/intermediate is uploaded to %s as its files are written", toolkit_env.sagemaker_s3_output())


def wait(bound_sec: float = UPLOAD_WAIT_SEC) -> None:
    """Once output/success or output/failure is written: let the sync finish its uploads,
    for at most `bound_sec`, then stop it (saying so)."""
    global _sync
    if _sync is None:
        return
    sync, _sync = _sync, None
    if not sync.is_alive():
        return
    started = time.monotonic()
    log.info("waiting up to %.0f s for output/intermediate's last uploads", bound_sec)
    sync.join(bound_sec)
    if sync.is_alive():
        log.warning("output/intermediate's uploads did not end within %.0f s: stopping them; files written in "
                    "the job's last moments may be missing from S3", bound_sec)
        sync.terminate()
        sync.join(5.0)
    else:
        log.info("output/intermediate's uploads done in %.1f s", time.monotonic() - started)
