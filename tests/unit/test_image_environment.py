"""The image's environment defaults (container/environment): read as `train` reads them at
start, the job's own environment winning, a malformed line named."""
import os

import pytest

from trainer.image_environment import apply_image_environment, at_python_start, cpu_defaults, network_interface_that_exists

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_shipped_defaults_parse_and_the_job_s_own_win():
    environ = {"KMP_BLOCKTIME": "0"}
    applied = apply_image_environment(os.path.join(ROOT, "container", "environment"), environ)
    assert environ["KMP_BLOCKTIME"] == "0" and "KMP_BLOCKTIME" not in applied  # the job's own setting
    assert applied["KMP_SETTINGS"] == "0" and "KMP_AFFINITY" not in applied  # KMP_AFFINITY: decided per process
    assert applied["OMPI_MCA_btl_vader_single_copy_mechanism"] == "none" and applied["PYTHONUNBUFFERED"] == "1"


def test_no_file_outside_the_image(tmp_path):
    assert apply_image_environment(str(tmp_path / "none"), {}) == {}


def test_a_malformed_line_is_named(tmp_path):
    path = tmp_path / "environment"
    path.write_text("# defaults\nA=1\nnot a setting\n")
    with pytest.raises(ValueError, match=r"environment line 3: expected KEY=VALUE, got 'not a setting'"):
        apply_image_environment(str(path), {})


SHIPPED = os.path.join(ROOT, "container", "environment")


@pytest.mark.parametrize("environ, argv, changed", [
    ({"TRAINER_LAUNCHED_BY_TRAIN": "1"}, ["/usr/bin/python3", "script.py"], False),  # train gave it its settings
    ({}, ["/usr/local/bin/train"], False),  # train itself, which decides them
    ({}, ["/usr/bin/python3", "-m", "trainer.worker", "--serve", "ps"], False),
    ({}, ["/usr/bin/python3", "train.py", "--epochs", "1"], True),  # ModelTrainer's driver started it
    ({}, ["/usr/bin/python3", "-m", "mpi4py", "train.py"], True),
])
def test_which_processes_get_the_defaults_at_python_start(environ, argv, changed):
    before = dict(environ)
    at_python_start(environ, argv, SHIPPED)
    assert (environ != before) == changed
    if changed:
        omp = int(environ["OMP_NUM_THREADS"])
        assert omp >= 1 and environ["KMP_BLOCKTIME"] == "1"
        assert environ["KMP_AFFINITY"] == ("disabled" if omp == 1 else "granularity=fine,compact,1,0")
        assert "OMP_NUM_THREADS" in environ["TRAINER_DERIVED_CPU_SETTINGS"].split(",")


# 8 vCPUs, 4 physical cores: what a process of a ModelTrainer job is given.
CPU_CASES = {
    "one process: the host less one vCPU (and core) for the input pipeline": (
        {}, {"OMP_NUM_THREADS": "3", "TF_NUM_INTRAOP_THREADS": "7", "TF_NUM_INTEROP_THREADS": "2"}),
    "one of two mpirun ranks on the host: its half": (
        {"OMPI_COMM_WORLD_LOCAL_SIZE": "2"},
        {"OMP_NUM_THREADS": "1", "TF_NUM_INTRAOP_THREADS": "3", "TF_NUM_INTEROP_THREADS": "2"}),
    "a rank whose launcher's settings were derived: derived again for the rank": (
        {"OMPI_COMM_WORLD_LOCAL_SIZE": "2", "OMP_NUM_THREADS": "3", "TF_NUM_INTRAOP_THREADS": "7",
         "TRAINER_DERIVED_CPU_SETTINGS": "OMP_NUM_THREADS,TF_NUM_INTRAOP_THREADS"},
        {"OMP_NUM_THREADS": "1", "TF_NUM_INTRAOP_THREADS": "3", "TF_NUM_INTEROP_THREADS": "2"}),
    "the job's own settings stay": (
        {"OMP_NUM_THREADS": "6", "TF_NUM_INTRAOP_THREADS": "5", "KMP_AFFINITY": "disabled"},
        {"TF_NUM_INTEROP_THREADS": "2"}),
}


@pytest.mark.parametrize("name", CPU_CASES)
def test_cpu_settings_of_a_process_train_did_not_start(name):
    environ, expected = CPU_CASES[name]
    got = cpu_defaults(environ, num_cpus=8, num_physical_cores=4)
    assert {key: got[key] for key in expected} == expected
    assert not set(got) & {key for key in environ if key not in environ.get("TRAINER_DERIVED_CPU_SETTINGS", "")}


# SM_NETWORK_INTERFACE_NAME and the container's interfaces (loopback left out) -> what a
# process that `train` did not start is given.
ETH0, ETH1 = {"eth0": ("172.18.0.2",)}, {"eth1": ("10.0.0.2",)}
INTERFACE_CASES = {
    "ModelTrainer's local mode names SageMaker's ethwe; the container has eth0": ("ethwe", ETH0, "eth0"),
    "on SageMaker: ethwe exists": ("ethwe", {"ethwe": ("10.0.0.9",)}, "ethwe"),
    "named and present among several": ("eth1", {**ETH0, **ETH1}, "eth1"),
    "absent, and several others: no clear choice": ("ethwe", {**ETH0, **ETH1}, "ethwe"),
    "absent; one other has an address, one has none": ("ethwe", {**ETH0, "tunl0": ()}, "eth0"),
    "no interface at all": ("ethwe", {}, "ethwe"),
    "not set": (None, ETH0, None),
}


@pytest.mark.parametrize("name", INTERFACE_CASES)
def test_the_network_interface_mpi_is_told_exists(name):
    named, present, expected = INTERFACE_CASES[name]
    environ = {} if named is None else {"SM_NETWORK_INTERFACE_NAME": named}
    environ.update(network_interface_that_exists(environ, present))
    assert environ.get("SM_NETWORK_INTERFACE_NAME") == expected


HOROVOD_TF_KERAS = "import tensorflow as tf\nimport horovod.tensorflow.keras as hvd\n"


@pytest.mark.parametrize("source, argv, environ, expected", [
    # ModelTrainer's MPI driver: mpirun ... python -m mpi4py script.py; its basic driver: python script.py
    (HOROVOD_TF_KERAS, ["python3", "-m", "mpi4py", "{script}"], {}, {"TF_USE_LEGACY_KERAS": "1"}),
    (HOROVOD_TF_KERAS, ["python3", "-u", "{script}", "--epochs", "1"], {}, {"TF_USE_LEGACY_KERAS": "1"}),
    # the job chose itself; the script uses Keras 3's own API; Horovod's API for the keras package
    (HOROVOD_TF_KERAS, ["python3", "{script}"], {"TF_USE_LEGACY_KERAS": "0"}, {}),
    (HOROVOD_TF_KERAS + "x = tf.keras.ops.sum\n", ["python3", "{script}"], {}, {}),
    ("import horovod.keras as hvd\n", ["python3", "{script}"], {}, {}),
    # no Horovod Keras API, or no script at all
    ("import tensorflow as tf\n", ["python3", "{script}"], {}, {}),
    (HOROVOD_TF_KERAS, ["python3", "-c", "import horovod"], {}, {}),
    (HOROVOD_TF_KERAS, ["python3", "-m", "trainer.worker"], {}, {}),
    (HOROVOD_TF_KERAS, ["python3", "absent.py"], {}, {}),
])
def test_a_horovod_tf_keras_script_run_by_model_trainer_s_drivers_gets_keras_2(tmp_path, source, argv, environ,
                                                                                 expected):
    from trainer.image_environment import keras_for_a_script
    from trainer.tf_line import LINES

    script = tmp_path / "train.py"
    script.write_text(source)
    argv = [arg.format(script=script) for arg in argv]
    assert keras_for_a_script(dict(environ), argv, LINES["2.21"]) == expected
    assert keras_for_a_script(dict(environ), argv, LINES["2.14"]) == {}  # tf.keras is Keras 2 there
