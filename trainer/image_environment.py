"""The image's environment defaults (container/environment, baked in as
/etc/trainer/environment), for `train` and for the Python processes it did not start.

`train` applies them first thing, where the job's environment is silent, and derives each
process's CPU settings itself (trainer.cpu.settings). Processes it did not start get them
from `at_python_start`, which the image's Python runs in every process (a .pth file that
container/install-trainer.sh puts in site-packages): SageMaker's ModelTrainer runs its own
driver as the container's entry point (sm_train.sh, then `python3` on the user's script, or
mpirun of it), and that script would otherwise run with neither the OpenMP defaults nor
its share of the host's threads. Under mpirun the share is one of OMPI_COMM_WORLD_LOCAL_SIZE.
"""
from __future__ import annotations

import os

# The image's defaults (container/install.sh puts container/environment here).
IMAGE_ENVIRONMENT = "/etc/trainer/environment"
# Set by `train` for itself and so for every process it starts: their settings are its.
LAUNCHED_BY_TRAIN = "TRAINER_LAUNCHED_BY_TRAIN"
# The CPU settings at_python_start derived (not the job's own): a child process, which may
# be one of several ranks on the host, derives them again for its own share.
DERIVED = "TRAINER_DERIVED_CPU_SETTINGS"


def apply_image_environment(path: str = IMAGE_ENVIRONMENT, environ=os.environ) -> dict[str, str]:
    """Set each KEY=VALUE of the image's defaults that the environment does not already
    have (a job's own setting wins); the ones set. Outside the image there is no file."""
    applied = {}
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return applied
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{path} line {number}: expected KEY=VALUE, got {line!r}")
        if key.strip() not in environ:
            environ[key.strip()] = applied[key.strip()] = value.strip()
    return applied


def is_train(argv: list[str]) -> bool:
    """Whether this command line is `train` or `trainer` (console scripts, or `-m trainer...`)."""
    if argv and os.path.basename(argv[0]) in ("train", "trainer"):
        return True
    return "-m" in argv[:-1] and argv[argv.index("-m") + 1].split(".")[0] == "trainer"


def cpu_defaults(environ, num_cpus: int, num_physical_cores: int) -> dict[str, str]:
    """The thread and OpenMP settings of one of the host's OMPI_COMM_WORLD_LOCAL_SIZE processes,
    for the ones the environment does not set itself (or that were derived for a parent)."""
    from trainer.cpu.settings import decide

    derived = set(filter(None, environ.get(DERIVED, "").split(",")))
    own = {key: value for key, value in environ.items() if key not in derived}
    per_host = max(1, int(environ.get("OMPI_COMM_WORLD_LOCAL_SIZE") or 1))
    settings = decide(None, num_cpus, num_physical_cores, per_host, own)
    values = {**settings.environment(), "TF_NUM_INTRAOP_THREADS": str(settings.intra_op_threads),
              "TF_NUM_INTEROP_THREADS": str(settings.inter_op_threads)}
    return {key: value for key, value in values.items() if key not in own}


NETWORK_INTERFACE = "SM_NETWORK_INTERFACE_NAME"


def network_interface_that_exists(environ, present: dict[str, tuple[str, ...]]) -> dict[str, str]:
    """SM_NETWORK_INTERFACE_NAME where the one it names is not in this container and another
    clearly is the job's (trainer.contract.network): ModelTrainer's MPI driver passes that
    name to mpirun (`btl_tcp_if_include`). Nothing changes where the named interface exists
    or the choice is not clear."""
    from trainer.contract.network import choose_interface

    named = environ.get(NETWORK_INTERFACE)
    if not named:
        return {}
    choice = choose_interface(named, present, None, environ.get("SM_CURRENT_HOST", "this host"))
    return {NETWORK_INTERFACE: choice.name} if choice.name != named else {}


def script_of(argv: list[str]) -> str | None:
    """The user's script a Python command line runs (`python script.py`, or `python -m mpi4py
    script.py` as ModelTrainer's MPI driver runs it under mpirun), or None."""
    rest = list(argv[1:])
    while rest:
        arg = rest.pop(0)
        if arg == "-m":
            if not rest or rest.pop(0) != "mpi4py":
                return None
        elif arg == "-c":
            return None
        elif not arg.startswith("-"):
            return arg if arg.endswith(".py") and os.path.isfile(arg) else None
    return None


def keras_for_a_script(environ, argv: list[str], line=None) -> dict[str, str]:
    """A script ModelTrainer's drivers run themselves that uses Horovod's tf.keras API gets
    tf.keras as Keras 2 on a Keras 3 line (TF_USE_LEGACY_KERAS), as through `train`
    (trainer.tf_line.script_environment): Horovod's optimizer wrapper is Keras 2's."""
    script = script_of(argv)
    if script is None:
        return {}
    from trainer.contract.user_code import horovod_keras_use, keras_3_use
    from trainer.tf_line import installed

    line = line or installed()
    if not line.keras_3:
        return {}
    with open(script, encoding="utf-8", errors="replace") as f:
        source = f.read()
    if not horovod_keras_use(source).endswith(": horovod.tensorflow.keras"):
        return {}
    return dict(line.script_environment(False, keras_3_use(source), environ))


def at_python_start(environ=os.environ, argv: list[str] | None = None, path: str = IMAGE_ENVIRONMENT) -> None:
    """In a Python process of the image that `train` did not start: its defaults and CPU
    settings, before anything imports TensorFlow. Never raises: it runs in every process."""
    import sys

    try:
        if environ.get(LAUNCHED_BY_TRAIN) or is_train(list(getattr(sys, "orig_argv", sys.argv)) if argv is None
                                                     else argv):
            return
        apply_image_environment(path, environ)
        from trainer.contract.network import present_interfaces
        from trainer.cpu.settings import physical_cores

        allowed = os.sched_getaffinity(0)
        derived = cpu_defaults(environ, len(allowed), physical_cores(allowed))
        environ.update(derived)
        if derived:
            environ[DERIVED] = ",".join(sorted(derived))
        environ.update(network_interface_that_exists(environ, present_interfaces()))
        environ.update(keras_for_a_script(environ, list(getattr(sys, "orig_argv", sys.argv)) if argv is None else argv))
    except Exception:  # a Python process of the image must start whatever happens here
        pass
    trust_for_a_model_trainer_driver(environ, list(getattr(sys, "orig_argv", sys.argv)) if argv is None else argv)


def trust_for_a_model_trainer_driver(environ, argv: list[str], wait_sec: float = 300.0) -> None:
    """ModelTrainer's MPI driver logs in from every host to the others with the key it finds
    and the image has none: this job's keys and trust are made before it starts
    (trainer.launch.ssh_trust), bounded by `wait_sec` (the driver's own wait for its peers).
    If they cannot be made, the job ends here saying why, in its failure file."""
    import json

    try:
        from trainer.plan.sdk import driver_ssh_trust

        trust = driver_ssh_trust(json.loads(environ.get("SM_HOSTS") or "[]"), {}, argv)
    except Exception:
        return
    if trust is None:
        return
    import logging
    import sys

    from trainer.launch.ssh_trust import trust_for_a_driver
    from trainer.logs import setup_logging

    setup_logging()
    try:
        trust_for_a_driver(environ["SM_CURRENT_HOST"], trust, wait_sec)
    except Exception as err:
        reason = f"ssh between the job's hosts for ModelTrainer's MPI driver could not be set up: {err}"
        logging.getLogger("trainer").error("%s", reason)
        try:
            with open(os.path.join(environ.get("SM_OUTPUT_DIR", "/opt/ml/output"), "failure"), "w") as f:
                f.write(reason + "\n")
        finally:
            sys.stderr.flush()
            os._exit(1)  # raising here would only be printed by site.py, and the driver would go on
