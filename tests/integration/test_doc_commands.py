"""Every shell command of README.md and docs/ runs as written.

The commands are read from the pages' `bash` blocks. Each one runs here, as written, in a
scratch folder (in the order the pages give them: the first job's data is the next
commands' data), or is listed in ELSEWHERE with the test that runs it: as written, or, for
a benchmark or a build that takes minutes, with smaller sizes. A command in the docs that
is in neither list fails the suite, and so does a listed test that does not exist."""
from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import time
import urllib.request

import pytest

from conftest import AWS_DEEPFM, CRITEO_SAMPLE, PROJECT_ROOT, shared_file

pytestmark = pytest.mark.slow
ROOT = pathlib.Path(PROJECT_ROOT)
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))

# Run by other tests (or CI itself): the command -> (the test, how it runs there).
EXACT, SMALLER = "as written", "with smaller sizes"
ELSEWHERE = {
    "./build.sh test": (".ci/run", EXACT),
    "./build.sh test-fast": ("tests/integration/test_doc_commands.py::test_the_documented_test_selections_are_in_the_suite",
                             "its selection, checked to be part of ./build.sh test's"),
    "./build.sh exec python -m pytest -n 0 tests/unit/test_peers.py":
        ("tests/integration/test_doc_commands.py::test_the_documented_test_selections_are_in_the_suite",
         "its selection, checked to be part of ./build.sh test's"),
    "./build.sh exec python -m pytest tests/integration":
        ("tests/integration/test_doc_commands.py::test_the_documented_test_selections_are_in_the_suite",
         "its selection, checked to be part of ./build.sh test's"),
    "TRAINER_TEST_CPU_LOG=/tmp/cores.jsonl ./build.sh test": (".ci/run", "without the log (the log changes no test)"),
    "./build.sh exec python tests/cores.py /tmp/cores.jsonl":
        ("tests/unit/test_cores.py::test_the_cpu_log_is_summed_by_tier_and_its_slowest_tests_listed",
         "on a log the test writes"),
    "./build.sh exec python -m pytest tests/integration -k pipe":
        ("tests/integration/test_doc_commands.py::test_the_documented_test_selections_are_in_the_suite",
         "its selection, checked to be part of ./build.sh test's"),
    "./build.sh test-line 2.21": (".ci/run", "beside the rest of ./build.sh test"),
    "./build.sh test-all": ("build.sh", "the full tier itself, run by hand before work is called done (longer than CI allows)"),
    "./build.sh image cpu": ("tests/conftest.py::image", EXACT),
    "./build.sh image cpu 2.21": ("tests/conftest.py::image_2_21", EXACT),
    "./build.sh push --dry-run --flavour 2.21-cpu --account 123456789012 --region us-east-1":
        ("tests/container/test_push.py::test_dry_run_prints_the_ecr_commands", EXACT),
    "./build.sh preflight": ("tests/conftest.py::network_ready", EXACT),
    "./build.sh push --dry-run --account 123456789012 --region us-east-1":
        ("tests/container/test_push.py::test_dry_run_prints_the_ecr_commands", EXACT),
    "./build.sh push --flavour 2.21-cpu": ("tests/container/test_push.py::test_dry_run_prints_the_ecr_commands",
                                          "its commands, dry (a real ECR push needs AWS credentials, which no test "
                                          "here has)"),
    "./build.sh push": ("tests/container/test_push.py::test_dry_run_prints_the_ecr_commands",
                        "its commands, dry (a real ECR push needs AWS credentials, which no test here has)"),
    "./build.sh push --registry 127.0.0.1:5000 --insecure --repository trainer --tag dev":
        ("tests/container/test_push.py::test_push_to_a_local_registry", "on a free port, repository trainer-test"),
    "./build.sh bench optimizers --keras-adam": ("tests/integration/test_bench.py::test_optimizers", SMALLER),
    "./build.sh bench input": ("tests/integration/test_bench.py::test_input", SMALLER),
    "./build.sh bench ceiling": ("tests/integration/test_bench.py::test_ceiling", SMALLER),
    "./build.sh bench modes": ("tests/integration/test_bench.py::test_modes_reads_each_jobs_metrics", SMALLER),
    "./build.sh bench peer": ("tests/integration/test_bench.py::test_peer_trains_deepctr_in_its_own_environment",
                              SMALLER),
    "./build.sh bench limit": ("tests/integration/test_bench.py::test_limit", SMALLER),
    "./build.sh exec trainer plan --channel training=data/train --hosts 2 --instance-type ml.c5.xlarge --cpus 4 --probe":
        ("tests/integration/test_bench.py::test_scale_compares_one_host_with_two_hosts_of_their_own_cpus",
         "through bench scale, which runs it on its own data without --instance-type (no price, loopback)"),
    "./build.sh bench scale": ("tests/integration/test_bench.py::test_scale_compares_one_host_with_two_hosts_of_their_own_cpus",
                               SMALLER),
    "./build.sh bench build": ("tests/integration/test_bench.py::test_build_compares_tensorflow_builds_in_their_own_processes",
                               SMALLER),
    "./build.sh bench switches": ("tests/integration/test_bench.py::test_switches", SMALLER),
    "./build.sh bench settings": ("tests/integration/test_bench.py::test_settings", SMALLER),
    "./build.sh bench --line 2.21 settings": ("tests/integration/test_bench.py::test_settings",
                                              "with smaller sizes, on the 2.21 line (its `line` marker: tests/lines.py)"),
    "./build.sh bench --line 2.21 scripts": (
        "tests/integration/test_bench.py::test_scripts_runs_users_scripts_through_train_and_the_aws_way",
        "with smaller sizes, on the 2.21 line (its `line` marker: tests/lines.py)"),
    "./build.sh bench ops": ("tests/integration/test_bench.py::test_ops_sums_the_profiled_op_time_by_type", SMALLER),
    "./build.sh bench hetero": ("tests/integration/test_bench.py::test_hetero_trains_with_and_without_a_data_host",
                                SMALLER),
    "./build.sh bench scripts": ("tests/integration/test_bench.py::test_scripts_runs_users_scripts_through_train_and_the_aws_way",
                                 SMALLER),
}
SERVERS = {"./build.sh exec tensorboard --logdir jobs/first": "http://localhost:6006"}  # run, answer, stopped


def documented_commands() -> list[tuple[str, str]]:
    """(page, command) of every bash block, continuation lines joined and comments dropped."""
    found = []
    for page in PAGES:
        for block in re.findall(r"```bash\n(.*?)```", page.read_text(), re.S):
            for command in re.sub(r"\\\n\s*", "", block).splitlines():
                command = re.sub(r"\s+#.*$", "", command).strip()
                if command and not command.startswith("#"):
                    found.append((page.name, re.sub(r"\s+", " ", command)))
    return found


@pytest.mark.cores(0)
def test_every_documented_command_is_run_by_a_test():
    unmapped = [f"{page}: {command}" for page, command in documented_commands()
                if command not in ELSEWHERE and command not in SERVERS and not runs_here(command)]
    assert not unmapped, f"documented commands no test runs: {unmapped}"
    for command, (where, _) in ELSEWHERE.items():
        path, _, name = where.partition("::")
        source = (ROOT / path).read_text()
        assert not name or re.search(rf"^def {name}\(", source, re.M), f"{command}: {where} does not exist"


def runs_here(command: str) -> bool:
    return command.startswith(("./build.sh exec trainer ", "./build.sh demo"))


def run(command: str, cwd, timeout: float = 600) -> subprocess.CompletedProcess:
    """`command` as written, from `cwd` (./build.sh is the project's)."""
    done = subprocess.run(command.replace("./build.sh", str(ROOT / "build.sh"), 1), shell=True, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """A user's folder, with the two files the data tools' examples name (from ../shared)."""
    folder = tmp_path_factory.mktemp("user")
    shutil.copy(shared_file(CRITEO_SAMPLE), folder / "day_0.txt")
    shutil.copy(shared_file(AWS_DEEPFM), folder / "val.tfrecords")
    return folder


@pytest.mark.cores(1)  # about one core busy (measured: TRAINER_TEST_CPU_LOG)
def test_the_documented_commands_run_as_written(scratch):
    """In the pages' order, so that the first job's data is there for the commands after it."""
    ran = []
    for page, command in documented_commands():
        if not runs_here(command) or command in ELSEWHERE or command in ran:
            continue  # ELSEWHERE's run in their own tests (the probe: on both cores, in bench scale's)
        started = time.monotonic()
        done = run(command, scratch)
        ran.append(command)
        print(f"{page}: {command} ({time.monotonic() - started:.0f} s)")
        check_output(command, done.stdout, done.stderr, scratch)
    assert len(ran) >= 12, ran


def check_output(command: str, stdout: str, stderr: str, cwd) -> None:
    """What each kind of command must have done, beyond its exit code."""
    output = stdout + stderr
    if " trainer local " in command:
        assert "SUCCEEDED" in output and "eval_auc:" in output, output[-3000:]
    elif command.startswith("./build.sh demo"):
        assert "SUCCEEDED" in stdout, output[-3000:]
        assert re.search(r"eval_auc: 0\.\d+", stdout) and re.search(r"train_samples_per_sec: \d", stdout), stdout
        assert f"model: {ROOT / 'out' / 'demo' / 'job' / 'model' / '1'}" in stdout, stdout
    elif " trainer tune " in command:
        assert "as hyperparameters: intra_op_threads=" in stdout and "batch_size=1024:" in stdout, stdout
        result = json.loads((pathlib.Path(cwd) / "out" / "tune" / "tune.json").read_text())
        assert len(result["trials"]) >= 2 and all(t["samples_per_sec"] > 0 for t in result["trials"]), result
        assert [row["batch_size"] for row in result["batch_sizes"]] == [256, 1024], result
    elif " trainer plan " in command:
        result = json.loads(stdout)
        assert result["plan"]["mode"] and result.get("check_input", {}).get("exactly_once", True), stdout[-2000:]
    elif " trainer datagen " in command:
        assert re.search(r"\d+ rows in \d+ files under", output), output
        oracle = float(re.search(r"the hidden model's eval AUC (0\.\d{4})", output).group(1))
        assert (0.78 < oracle < 0.86) if "--signal 0.55" in command else (0.84 < oracle < 0.95), output


@pytest.mark.cores(1)
def test_tensorboard_serves_the_first_jobs_curves(scratch):
    """`tensorboard --logdir jobs/first` after the README's first job: it answers, then stops."""
    command = next(iter(SERVERS))
    if not (scratch / "jobs" / "first").exists():
        run("./build.sh exec trainer datagen --output data/ --train-rows 20000 --eval-rows 2000", scratch)
        run("./build.sh exec trainer local --channel training=data/train --channel evaluation=data/eval "
            "--hp num_epochs=1 --job-dir jobs/first", scratch)
    server = subprocess.Popen(command.replace("./build.sh", str(ROOT / "build.sh"), 1), shell=True, cwd=scratch,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(SERVERS[command] + "/data/runs", timeout=5) as answer:
                    runs = answer.read().decode()
                    if "train" in runs:
                        break
            except OSError:
                pass
            assert server.poll() is None and time.monotonic() < deadline, "tensorboard did not answer"
            time.sleep(1)
    finally:
        os.killpg(server.pid, 15)
        server.wait(30)


@pytest.mark.cores(1)
def test_the_documented_test_selections_are_in_the_suite():
    """`./build.sh test-fast` and the documented pytest selections pick tests of the whole
    suite (which CI runs), and some."""
    def collected(*args) -> set[str]:
        done = subprocess.run([str(ROOT / "build.sh"), *args, "--collect-only", "-q", "-n", "0"], cwd=ROOT,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        return {line for line in done.stdout.splitlines() if "::" in line}

    whole = collected("exec", "python", "-m", "pytest")
    for selection in (("test-fast",), ("exec", "python", "-m", "pytest", "tests/integration"),
                      ("exec", "python", "-m", "pytest", "tests/integration", "-k", "pipe"),
                      ("exec", "python", "-m", "pytest", "tests/unit/test_peers.py")):
        chosen = collected(*selection)
        assert chosen and chosen <= whole, selection
