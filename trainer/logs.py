"""The job log's format, for every process of the job (train, its ranks and tasks, the tools)."""
from __future__ import annotations

import logging
import os
import sys

# The one logger every rank keeps at INFO (the others log warnings only): what each rank starts from.
EVERY_RANK_LOGGER = "trainer.start"


def setup_logging() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, force=True,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # TensorFlow's INFO lines (oneDNN notices, per-step collective and closure chatter) and
    # the toolkit's GPU/Neuron probes are noise in a job log.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    for name in ("sagemaker-training-toolkit", "tensorflow"):
        logging.getLogger(name).setLevel(logging.WARNING)
