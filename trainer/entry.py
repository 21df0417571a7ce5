"""`train`: the executable SageMaker runs in the container (`docker run <image> train`).

Reads the job, applies the CPU settings before TensorFlow loads, trains, and leaves
`output/success`, or `output/failure` with the reason first and a non-zero exit.
"""
from __future__ import annotations

import logging
import os
import sys

from trainer import cpu
from trainer.contract.job import base_dir_from_env, output_dir_of, read_job
from trainer.errors import JobError
from trainer.report import clear_status, failure_from_exception, write_success

log = logging.getLogger("trainer")
EXIT_JOB_ERROR = 1
EXIT_INTERNAL_ERROR = 2


def setup_logging() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, force=True,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # TensorFlow's C++ INFO lines (oneDNN notices) and the toolkit's GPU/Neuron probes are
    # noise in a job log.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    logging.getLogger("sagemaker-training-toolkit").setLevel(logging.WARNING)


def train_main() -> int:
    setup_logging()
    base_dir = base_dir_from_env()
    output_dir = output_dir_of(base_dir)
    clear_status(output_dir)
    try:
        job = read_job(base_dir)
        settings = cpu.decide(job.hyperparameters, job.num_cpus, job.num_physical_cores)
        cpu.apply_environment(settings)
        from trainer.training.run import train  # imports TensorFlow: after the CPU settings

        cpu.apply_tensorflow_threads(settings)
        metrics = train(job, settings)
    except JobError as err:
        failure_from_exception(output_dir, err, str(err))
        return EXIT_JOB_ERROR
    except Exception as err:  # anything else is still reported, reason first
        failure_from_exception(output_dir, err, f"{type(err).__name__}: {err}")
        return EXIT_INTERNAL_ERROR
    write_success(output_dir)
    log.info("done: eval_auc=%s train_samples_per_sec=%s model=%s", metrics["eval_auc"],
             metrics["train_samples_per_sec"], metrics["export_dir"])
    return 0


if __name__ == "__main__":
    sys.exit(train_main())
