"""Users' own training scripts through `train`, against the way AWS's TensorFlow container
runs them (trainer/bench/user_scripts/): a Keras DeepFM script; the same with Horovod on 2
ranks of one host (both lines; AWS's 2.21 image has no Horovod: its way there is its
toolkit's mpirun on this line's Horovod); on the 2.21 line also under
MultiWorkerMirroredStrategy on 2 hosts, what AWS's 2.21 image runs instead; and the Keras
script reading its data through `trainer.kit`.

Through `train` (`trainer local`, this line's environment): the line's TensorFlow build,
each process's CPU settings for its share of the host, Horovod's ranks bound to their own
cores. AWS's way, with no CPU settings (each process sees every core), the script run as
AWS's toolkit runs it (`python script.py`; `mpirun ... python -m mpi4py script.py` with its
binding, none; one `python script.py` a host with the TF_CONFIG the toolkit writes): on the
2.14 line in bench-envs/tensorflow-cpu.txt (stock tensorflow-cpu 2.14 with Horovod built
against it; `./build.sh bench scripts` sets TRAINER_BENCH_TF_CPU_PYTHON), on the 2.21 line
in the line's own environment, whose tensorflow-cpu 2.21 is the build AWS's 2.21 image runs.
The kit script's counterpart there is the plain Keras script (AWS's container has no kit).
Each script reports its own samples/sec (after its first 20 steps); one run of each.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from trainer.errors import JobError

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "user_scripts")
PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULT = re.compile(r"BENCH_RESULT (\{.*\})")
# The cases of each line: name: (script, ranks a host, hosts) through `train`, the script
# AWS's container runs for the same work, and what its user must set there for it to run.
# On the 2.21 line, Keras 2 for both: a horovod.tensorflow.keras script needs it (`train`
# sets it: trainer.tf_line.Line.script_environment), and a tf.keras fit under
# MultiWorkerMirroredStrategy fails on AWS's image without it (keras-team/keras#20585;
# through `train` it trains on Keras 3: trainer.script.keras_multi_worker_fit).
KERAS = {"Keras script": ("deepfm_keras.py", 1, 1, "deepfm_keras.py", {})}
KIT = {"Keras script, data by trainer.kit": ("deepfm_kit.py", 1, 1, "deepfm_keras.py", {})}
KERAS_2 = {"TF_USE_LEGACY_KERAS": "1"}
CASES = {
    "2.14": {**KERAS, "Horovod script, 2 ranks": ("deepfm_horovod.py", 2, 1, "deepfm_horovod.py", {}), **KIT},
    "2.21": {**KERAS, "Horovod script, 2 ranks": ("deepfm_horovod.py", 2, 1, "deepfm_horovod.py", KERAS_2),
             "Multi-worker mirrored script, 2 hosts": ("deepfm_multi_worker.py", 1, 2, "deepfm_multi_worker.py",
                                                       KERAS_2), **KIT},
}
# What AWS's toolkit gives mpirun on one host (sagemaker_training.mpi): no binding.
AWS_MPI_OPTIONS = ["--allow-run-as-root", "-bind-to", "none", "-map-by", "slot", "-mca", "btl_vader_single_copy_mechanism",
                   "none", "-mca", "plm_rsh_no_tree_spawn", "1", "-mca", "orte_abort_on_non_zero_status", "1"]
CPU_VARIABLES = ("OMP_NUM_THREADS", "KMP_AFFINITY", "KMP_BLOCKTIME", "KMP_SETTINGS", "TF_NUM_INTRAOP_THREADS",
                 "TF_NUM_INTEROP_THREADS", "TRAINER_DERIVED_CPU_SETTINGS")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=int, default=200_000, help="generated training records")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--aws-python", default=os.environ.get("TRAINER_BENCH_TF_CPU_PYTHON"),
                        help="python of the stock tensorflow-cpu environment (./build.sh bench scripts sets it; "
                             "on the 2.21 line, this environment's own)")


def reported(output: str, what: str) -> dict:
    """What the script reported: its samples_per_sec and the Keras its tf.keras was."""
    found = RESULT.findall(output)
    if not found:
        raise JobError(f"bench scripts: {what} reported no speed; its output ends:\n{output[-3000:]}")
    return json.loads(found[-1])


def scripts_environment(**extra) -> dict:
    """This process's environment without CPU settings, nor the Keras 2 switch that `trainer
    bench` sets for the container's own model: the scripts get the Keras their line gives."""
    from trainer.tf_line import LEGACY_KERAS_ENV

    return {**{key: value for key, value in os.environ.items()
               if key not in CPU_VARIABLES and key != LEGACY_KERAS_ENV}, **extra}


def through_train(script: str, ranks: int, hosts: int, data: str, epochs: int, folder: str) -> dict:
    hyperparameters = {"sagemaker_program": script, "sagemaker_submit_directory": SCRIPTS, "epochs": epochs}
    if ranks > 1:
        hyperparameters.update(sagemaker_mpi_enabled="true", sagemaker_mpi_num_of_processes_per_host=ranks)
    if hosts > 1:
        hyperparameters.update(sagemaker_multi_worker_mirrored_strategy_enabled="true")
    command = [sys.executable, "-m", "trainer", "local", "--channel", f"training={data}", "--job-dir", folder,
               "--hosts", str(hosts)]
    command += [arg for key, value in hyperparameters.items() for arg in ("--hp", f"{key}={value}")]
    done = subprocess.run(command, cwd=PROJECT_ROOT, env=scripts_environment(), capture_output=True, text=True,
                          timeout=1800)
    if done.returncode:
        raise JobError(f"bench scripts: {script} through train failed: {(done.stdout + done.stderr)[-3000:]}")
    return reported(done.stdout, f"{script} through train")


def unused_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for each in sockets:
        each.bind(("localhost", 0))
    ports = [each.getsockname()[1] for each in sockets]
    for each in sockets:
        each.close()
    return ports


def the_aws_way(python: str, script: str, ranks: int, hosts: int, data: str, epochs: int, folder: str,
                users_environment: dict) -> dict:
    """As AWS's container runs it: the toolkit's SM_* variables for the script, its command."""
    env = {key: value for key, value in scripts_environment(**users_environment).items()
           if not key.startswith(("TRAINER_", "SM_"))}
    env.update(SM_CHANNEL_TRAINING=data, SM_MODEL_DIR=os.path.join(folder, "model"), SM_CHANNELS='["training"]',
               PYTHONPATH=SCRIPTS, TF_CPP_MIN_LOG_LEVEL="2")
    program = [python, script, "--epochs", str(epochs)]
    if ranks > 1:
        exports = [arg for key in ("SM_CHANNEL_TRAINING", "SM_MODEL_DIR", "PYTHONPATH", "TF_CPP_MIN_LOG_LEVEL", "PATH")
                   for arg in ("-x", key)]
        program = ["mpirun", "--host", f"localhost:{ranks}", "-np", str(ranks), *AWS_MPI_OPTIONS, *exports,
                   python, "-m", "mpi4py", script, "--epochs", str(epochs)]
    # One process a host; the cluster's workers as the toolkit's TF_CONFIG lists them. Each
    # writes to a file (no pipe to fill), and one that fails ends the others (no wait on it).
    workers = [f"localhost:{port}" for port in unused_ports(hosts)] if hosts > 1 else []
    os.makedirs(folder, exist_ok=True)
    logs = [os.path.join(folder, f"host-{host}.log") for host in range(hosts)]
    started = []
    for host, log in enumerate(logs):
        config = {"TF_CONFIG": json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": host}})}
        with open(log, "w") as output:
            started.append(subprocess.Popen(program, cwd=SCRIPTS, stdout=output, stderr=subprocess.STDOUT,
                                            env={**env, **config} if workers else env))
    deadline = time.monotonic() + 1800
    while (any(process.poll() is None for process in started) and time.monotonic() < deadline
           and not any(process.poll() for process in started)):
        time.sleep(1)
    for process in started:
        process.kill()
        process.wait()
    outputs = [open(log).read() for log in logs]
    if any(process.returncode for process in started):
        raise JobError(f"bench scripts: {script} the AWS way failed: {''.join(outputs)[-3000:]}")
    return reported(outputs[0], f"{script} the AWS way")


def run(args: argparse.Namespace) -> dict:
    from trainer import tf_line
    from trainer.data import datagen

    line = tf_line.installed()
    # Stock TensorFlow's line (2.21) runs the very build AWS's image runs: its own environment.
    python = args.aws_python or (sys.executable if not line.openmp else None)
    if not python:
        raise JobError("bench scripts needs the stock tensorflow-cpu environment: run it as ./build.sh bench scripts "
                       "(or pass --aws-python)")
    folder = tempfile.mkdtemp(prefix="trainer-bench-scripts-")
    try:
        data = datagen.generate(os.path.join(folder, "data"), args.rows, 0, files=4)["train"]
        aws: dict[tuple, dict] = {}
        rows = []
        for name, (script, ranks, hosts, aws_script, users_environment) in CASES[line.name].items():
            ours = through_train(script, ranks, hosts, data, args.epochs, os.path.join(folder, f"train-{len(rows)}"))
            key = (aws_script, ranks, hosts)
            if key not in aws:
                aws[key] = the_aws_way(python, aws_script, ranks, hosts, data, args.epochs,
                                       os.path.join(folder, f"aws-{len(rows)}"), users_environment)
            theirs = aws[key]
            rows.append({"script": name, "ranks": ranks * hosts,
                         "train_samples_per_sec": round(ours["samples_per_sec"], 1),
                         "aws_samples_per_sec": round(theirs["samples_per_sec"], 1),
                         "ratio": round(ours["samples_per_sec"] / theirs["samples_per_sec"], 2),
                         "keras": ours["keras"], "aws_keras": theirs["keras"]})
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return {"benchmark": "scripts", "tensorflow_line": line.name, "rows": rows, "train_rows": args.rows,
            "epochs": args.epochs}


def table(result: dict) -> str:
    kerases = sorted({row[side] for row in result["rows"] for side in ("keras", "aws_keras")})
    lines = [f"TensorFlow {result['tensorflow_line']} line; the scripts' tf.keras: {', '.join(kerases)}", "",
             "script | through train, samples/s | the AWS way, samples/s | ratio", "--- | --- | --- | ---"]
    lines += [f"{row['script']} | {row['train_samples_per_sec']:,.0f} | {row['aws_samples_per_sec']:,.0f} | "
              f"{row['ratio']:.2f}x" for row in result["rows"]]
    return "\n".join(lines)


def charts(result: dict):
    from trainer.bench.charts import Chart

    labels, values = [], []
    for row in result["rows"]:
        labels += [f"{row['script']}: train", f"{row['script']}: AWS way"]
        values += [row["train_samples_per_sec"], row["aws_samples_per_sec"]]
    return [Chart("scripts", f"Users' scripts through train and the AWS way ({result['train_rows']:,} records)",
                  "samples/s", labels, values, highlight=[label for label in labels if label.endswith(": train")])]
