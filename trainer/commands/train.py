"""`train`: the executable SageMaker runs in the container (`docker run <image> train`).

Reads the job, plans how to use its hosts and devices, trains (here or through the ranks it
launches), and leaves `output/success`, or `output/failure` with the reason first and a
non-zero exit.
"""
from __future__ import annotations

import logging
import os
import signal
import sys
from typing import NoReturn

from trainer.contract.job import base_dir_from_env, output_dir_of, read_job
from trainer.errors import Stopped
from trainer.image_environment import LAUNCHED_BY_TRAIN, apply_image_environment
from trainer.logs import setup_logging
from trainer.report import clear_status, report_failures, write_success

log = logging.getLogger("trainer")


def stop_outside_training(signum, frame) -> None:
    """SIGTERM before training has started (reading the job, waiting for the other hosts)
    or after it has ended: nothing to save, so end now. In a container `train` is PID 1,
    which the kernel gives no default action for SIGTERM: without a handler it would run
    on until SIGKILL. Training installs its own handler (trainer.training.stop)."""
    raise Stopped("stopped by SIGTERM outside training (while starting or ending): nothing to save")


def end_after_success(signum, frame) -> None:
    """SIGTERM once this host's part has succeeded (its outputs written, the other hosts
    being awaited): the job is ending, and this host's part of it did not fail."""
    log.info("SIGTERM after this host's part succeeded: ending with success")
    end_process(0)


TOOLKIT_MODULE_ENV = "SAGEMAKER_TRAINING_MODULE"


def trust_for_the_toolkit() -> None:
    """The toolkit's MPI runner across hosts logs in from every host to the others with the
    key it finds: make this job's keys and trust first (trainer.launch.ssh_trust)."""
    from sagemaker_training import environment

    from trainer.contract.hyperparameters import SPEC_BY_NAME
    from trainer.plan.sdk import driver_ssh_trust

    resources, hyperparameters = environment.read_resource_config(), environment.read_hyperparameters()
    trust = driver_ssh_trust(resources.get("hosts", []), hyperparameters, [])
    if trust is not None:
        from trainer.launch.ssh_trust import trust_for_a_driver

        wait = SPEC_BY_NAME["peer_wait_sec"]
        trust_for_a_driver(resources["current_host"], trust, wait.parse(hyperparameters.get(wait.name, wait.default)))


def train_main() -> NoReturn:
    os.environ[LAUNCHED_BY_TRAIN] = "1"  # what it starts gets its CPU settings from it
    apply_image_environment()
    setup_logging()
    if os.environ.get(TOOLKIT_MODULE_ENV):
        # The image's `train` is this one; an image built on it that names its own framework
        # module the toolkit's way still gets the toolkit's `train`, which runs that module.
        log.info("%s=%s: the SageMaker training toolkit runs the job", TOOLKIT_MODULE_ENV,
                 os.environ[TOOLKIT_MODULE_ENV])
        exit_code = report_failures(output_dir_of(base_dir_from_env()), trust_for_the_toolkit)
        if exit_code:
            end_process(exit_code)
        from sagemaker_training.cli.train import main as toolkit_train

        toolkit_train()
        end_process(0)
    signal.signal(signal.SIGTERM, stop_outside_training)
    base_dir = base_dir_from_env()
    output_dir = output_dir_of(base_dir)
    clear_status(output_dir)
    outcome = {}

    def work():
        from trainer.launch import host as launch

        outcome["job"] = read_job(base_dir)
        outcome["metrics"] = launch.run(outcome["job"])

    exit_code = report_failures(output_dir, work)
    if exit_code != 0 and "job" in outcome:
        # The failure file is written; the job's other hosts may still need its reason.
        signal.signal(signal.SIGTERM, lambda signum, frame: end_process(exit_code))
        from trainer.launch.host import tell_the_others_how_it_ended

        tell_the_others_how_it_ended(outcome["job"])
    if exit_code == 0:
        signal.signal(signal.SIGTERM, end_after_success)
        write_success(output_dir)
        metrics = outcome.get("metrics")
        if metrics and metrics.get("export_dir"):
            log.info("done: eval_auc=%s train_samples_per_sec=%s model=%s", metrics["eval_auc"],
                     metrics["train_samples_per_sec"], metrics["export_dir"])
        else:
            log.info("done: this host's part of the job has ended")
        from trainer.launch.host import end_with_the_job

        end_with_the_job(outcome["job"])
    end_process(exit_code)


def end_process(exit_code: int) -> NoReturn:
    """End `train` once its outputs are written. Python's own exit would first tear down
    TensorFlow's runtime, which with parameter servers removes every function from every
    remote task, one RPC at a time: minutes when the other hosts have already gone. The
    upload of output/intermediate is waited for first (bounded)."""
    from trainer.contract import intermediate_output

    intermediate_output.wait()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code)


if __name__ == "__main__":
    sys.exit(train_main())
