"""Run the user's training script on this host, as AWS's TensorFlow container runs it.

Preparing the code is the SageMaker training toolkit's (its `entry_point.install`: a
package's `setup.py`, a command made executable, `requirements.txt`), with one thing
first: requirements that the code's own folder can satisfy (a wheel shipped beside the
script) install with no network. Running it is this container's: the toolkit's runners
wait for every host name for up to 15 minutes without a word, do not pass SIGTERM on
with a bounded grace, and end a worker host of a parameter-server job only when the
master stops answering `curl` (forever, if it never answered). Here the peers are awaited
with a bound before this runs (trainer.supervision.peers), and:

- parameter servers: this host's PS task runs beside its script (AWS's TF_CONFIG); the
  hosts after the first end when the first host's script has ended (or fail, naming it,
  when that host is lost);
- multi-worker mirrored, or no distribution: the script on every host, each ending itself;
- MPI: mpirun through trainer.supervision.supervise (one host) or the toolkit's MPI runner (several),
  each rank started by trainer.script.process.
"""
from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

from trainer.errors import JobError, PeerLost, Stopped
from trainer.contract import intermediate_output
from trainer.report import EXIT_STALLED, EXIT_STOPPED, AlreadyReported, write_failure
from trainer.script import process as script_process
from trainer.script import requirements, stacks, stall
from trainer.script.mpi_rank import ENDED_LINE
from trainer.script.stall import MPI_TAG
from trainer.supervision import peers, supervise

log = logging.getLogger("trainer")
OUTPUT_LINES_IN_FAILURE = 30
# The last line of a Python traceback ("KeyError: 'SM_CHANNEL_X'"), else a shell's error.
EXCEPTION_LINE = re.compile(r"^[\w.]+(?:Error|Exception|Exit|Interrupt)\b(?::.*)?$")
ERROR_LINE = re.compile(r".*(?:error|not found|No such file).*", re.IGNORECASE)
# In a rank's error when its collective found Horovod shut down: another rank ended or failed.
HOROVOD_SHUT_DOWN = "Horovod has been shut down"
# In a worker's error when a TensorFlow collective (multi-worker mirrored) failed.
TF_COLLECTIVE_ABORTED = "Collective ops is aborted by"
# The collective a failed rank was in, by the op that failed: Horovod's, then TensorFlow's.
COLLECTIVE_OPS = {"HorovodAllreduce": "an allreduce", "HorovodAllgather": "an allgather",
                  "HorovodAlltoall": "an alltoall", "HorovodBroadcast": "a broadcast",
                  "HorovodReducescatter": "a reduce-scatter", "CollectiveReduceV2": "an allreduce",
                  "CollectiveGatherV2": "an allgather", "CollectiveBcastSendV2": "a broadcast",
                  "CollectiveBcastRecvV2": "a broadcast"}
COLLECTIVE_OP = re.compile("(" + "|".join(COLLECTIVE_OPS) + ")")
# TensorFlow's error when two workers met in different collectives, which it reads as inputs
# of different shapes; with a script's own model it means the workers are out of step.
SHAPE_MISMATCH = re.compile(r"Shape mismatch in the collective instance \d+\. Op at device \S+ expected shape "
                            r"(\S+) but another member in the group expected shape (\S+)\.")
# A traceback frame inside the Keras package itself (not tf.keras's tf-keras, nor the script).
KERAS_FRAME = re.compile(r'File "[^"]*[/\\](?:site|dist)-packages[/\\]keras[/\\]')
OUT_OF_STEP = ("the ranks ran different numbers of steps or collectives, for example EarlyStopping, a data shard "
               "or a save on one rank only (docs/faults.md, 'Ranks out of step')")


def prepare(job, toolkit_env) -> None:
    """Install what the code needs, as the toolkit does, shipped wheels first and offline,
    without moving the image's pinned stack (trainer.script.requirements)."""
    from sagemaker_training import entry_point

    code_dir, program = job.entry_point.code_dir, job.entry_point.program
    allow = job.hyperparameters.allow_pin_changes
    pins = requirements.core_pins()
    requirements_txt = os.path.join(code_dir, "requirements.txt")
    if os.path.exists(requirements_txt):
        for change in requirements.check_requirements(requirements_txt, pins, allow_changes=allow):
            log.warning("%s=true: %s", requirements.OVERRIDE, change)
    pip_env = requirements.pip_environment(pins, tempfile.mkdtemp(prefix="trainer-pip-"), allow_changes=allow)
    if os.path.exists(requirements_txt) and any(name.endswith(".whl") for name in os.listdir(code_dir)):
        offline = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--find-links", code_dir,
                                  "-r", requirements_txt], cwd=code_dir, capture_output=True, text=True,
                                 env={**os.environ, **pip_env})
        log.info("requirements.txt from the wheels beside the script: %s",
                 "installed" if offline.returncode == 0 else "not all there; the package index is asked next")
    saved = {name: os.environ.get(name) for name in pip_env}
    os.environ.update(pip_env)  # the toolkit's pip inherits this process's environment
    try:
        # The toolkit reads its code dir at import; ours may be elsewhere (trainer local).
        entry_point.install(program, path=code_dir, capture_error=True)
    except Exception as err:  # the toolkit's InstallModuleError / InstallRequirementsError
        raise JobError(_install_failure(code_dir, requirements_txt, pins, str(err))) from err
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    intermediate_output.start(toolkit_env)


def _install_failure(code_dir: str, requirements_txt: str, pins: dict, toolkit_error: str) -> str:
    """Why the code could not be installed, in one line, from a dry run of pip: the toolkit's
    error keeps none of pip's output (its ErrorMessage is empty), and pip writes a
    conflict's cause to stdout."""
    output = toolkit_error
    if os.path.exists(requirements_txt):
        dry_run = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "-r", requirements_txt],
                                 cwd=code_dir, capture_output=True, text=True, timeout=600)
        output = dry_run.stdout + dry_run.stderr + output
        conflict = requirements.explain_pip_failure(output, pins)
        if conflict:
            return conflict
    pip_errors = [line.strip() for line in output.splitlines() if line.strip().startswith("ERROR:")]
    return (f"the code in {code_dir} cannot be installed (requirements.txt or setup.py): "
            f"{pip_errors[0] if pip_errors else last_error_line(output)}")


def last_error_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    exceptions = [line for line in lines if EXCEPTION_LINE.match(line)]
    errors = [line for line in lines if ERROR_LINE.match(line)]
    return (exceptions or errors or [""])[-1]  # none: how it ended says it all (a signal)


def output_of_rank(output: str, rank: int | None) -> str:
    """What mpirun's --tag-output marked as `rank`'s (all of it when untagged). A tag opens
    each piece a rank wrote, which may start inside a line when ranks write at once."""
    parts = MPI_TAG.split(output)  # text, then (rank, text) for every tag
    if rank is None or len(parts) == 1:
        return output
    return "".join(parts[i + 1] for i in range(1, len(parts), 2) if int(parts[i]) == rank) or output


def report_script_failure(job, who: str, how: str, output: str, ended_first: str = "") -> str:
    """Write the failure file: the script, the process, how it ended and its last error
    line first; then its last lines of output. `ended_first`: a rank whose script ended
    while this one still waited in a collective, which is the cause and goes first; so does
    TensorFlow's word that the ranks met in different collectives. Returns the first line."""
    last = last_error_line(output)
    ended = f"script {job.entry_point.program} ({who}) {how}" + (f": {last}" if last else "")
    tail = "\n".join(output.splitlines()[-OUTPUT_LINES_IN_FAILURE:])
    reason, detail = ended, f"its last lines of output:\n{tail}"
    ops = COLLECTIVE_OP.findall(output)  # the last one named is the one that failed
    collective = COLLECTIVE_OPS[ops[-1]] if ops else "a collective"
    mismatch = SHAPE_MISMATCH.search(output)
    if ended_first:
        reason = f"{ended_first} ended its script (exit code 0) while {who} still waited in {collective}: {OUT_OF_STEP}"
        detail = f"then {ended}\n{detail}"
    elif mismatch:
        reason = (f"{who} and another rank met in different collectives ({collective} of shape {mismatch.group(1)} "
                  f"against one of shape {mismatch.group(2)}): {OUT_OF_STEP}")
        detail = f"then {ended}\n{detail}"
    hint = keras_line_hint(job, output)
    write_failure(job.output_dir, f"{reason}\n{hint}" if hint else reason, detail, cause_first=True)
    log.error("%s", reason)
    if hint:
        log.error("%s", hint)
    return reason


def keras_line_hint(job, output: str) -> str:
    """Where a script that imports `keras` itself failed inside Keras on a line whose Keras is 2:
    it was likely written for Keras 3, whose APIs of the same names (`metrics=["auc"]`,
    `model.export`) fail inside Keras 2 with errors that do not say so. "" otherwise."""
    entry = job.entry_point
    if job.tf_line.keras_3 or not entry.keras_module or not KERAS_FRAME.search(output):
        return ""
    return (f"hint: {entry.program} imports keras ({entry.keras_module.split(':')[0]}) and failed inside Keras, "
            f"which on this image's TensorFlow {job.tf_line.name} line is {job.tf_line.keras}; a script written "
            "for Keras 3 (TensorFlow 2.16 or later) runs on the 2.21 image (tag 2.21-cpu)")


def rank_that_ended_first(output: str, failed_rank: int | None) -> int | None:
    """The rank whose script ended by itself (exit code 0) while `failed_rank` still waited
    in a Horovod collective (which then failed), from mpirun's tagged output; None when the
    failed rank's error is its own."""
    if failed_rank is None or HOROVOD_SHUT_DOWN not in output_of_rank(output, failed_rank):
        return None
    ended = [int(line.group(1)) for line in ENDED_LINE.finditer(output) if int(line.group(1)) != failed_rank]
    return ended[0] if ended else None


def mpirun_failure_writer(job, plan):
    """For trainer.supervision.supervise.supervise_mpirun: the failure file of a script's rank, from mpirun's
    output (its --tag-output marks whose each line is)."""
    def explain(rank, how, output):
        who = plan.process(rank).name if rank is not None else f"one of its {plan.world_size} ranks"
        ended = rank_that_ended_first(output, rank)
        report_script_failure(job, who, how, output_of_rank(output, rank),
                              ended_first=plan.process(ended).name if ended is not None else "")
    return explain


def exit_code_of(code: int) -> int:
    return 128 - code if code < 0 else code  # a signal's number, as a shell reports it


def run(job, plan, toolkit_env) -> None:
    """This host's part: its script process (and PS task), supervised."""
    mine = plan.on_host(job.current_host)
    process = next(p for p in mine if p.role != "ps")
    env = {**os.environ, **script_process.environment(job, plan, process, toolkit_env)}
    argv = script_process.command(job, toolkit_env=toolkit_env)
    # This host's parameter server, as AWS's container starts one beside the script.
    ps_task = supervise.start_tasks(job, ["ps"])[0] if any(p.role == "ps" for p in mine) else None
    log.info("running %s (%s): %s", job.entry_point.program, process.name, " ".join(argv))
    progress = stall.StallWatch(job, plan)
    script = supervise.Supervised(argv, env, cwd=job.entry_point.code_dir, stop_grace_sec=job.hyperparameters.stop_grace_sec,
                                  before_kill=progress.stacks_before_kill)
    # Scripts under mpirun do not come here: a leader host other than this one is the
    # parameter-server master's, which this host serves until it has ended.
    follows_leader = plan.leader not in (None, job.current_host)
    watch = PeerWatch(job, plan, script) if plan.watch_peers and not follows_leader else None
    try:
        if follows_leader:  # its script may serve, idle, until the master needs it: not watched for progress
            _serve_until_leader_ends(job, plan, process, script, ps_task)
        else:
            progress.follow(script)
            code = script.wait()
            progress.stop()
            if progress.stalled:
                raise AlreadyReported(EXIT_STALLED)
            ended_first = ""
            if watch is not None:
                if watch.ended_by is None and code != 0 and collective_failed(script.output_tail):
                    ended_first = watch.script_that_ended_well(plan)
                watch.stop()
                if watch.ended_by is not None and code != 0:
                    # Another host failed first: this script was ended for it, where its stacks say.
                    raise watch.ended_with_stacks
            _end_with(job, process, script, code, progress.stacks_at_kill, ended_first=ended_first)
            if ps_task is not None:
                _serve_the_workers_to_their_end(job)
    finally:
        script.end()
        if ps_task is not None:
            supervise.end_tasks([ps_task])
    if process.role == "chief":
        warn_if_no_model(job.model_dir, job.entry_point)


def collective_failed(output: str) -> bool:
    """Whether a script's output ends with a collective that failed for want of another
    rank: Horovod shut down under it, or TensorFlow aborted it."""
    return HOROVOD_SHUT_DOWN in output or TF_COLLECTIVE_ABORTED in output


class PeerWatch:
    """Follows every other host's state (trainer.supervision.peers) while this host's script runs: when
    one fails, stops or is lost, this script is ended (SIGTERM, then SIGKILL 10 s later)
    and `ended_by` says which host and why, so the job ends in seconds, not when
    TensorFlow's collectives time out. Hosts whose part ended well are kept in `ended_well`:
    when this script then fails in a collective, the first of them is why."""

    # How long a failed collective waits to hear that the host it lost had ended well: the
    # watch's poll (1 s) after that host's part ends, with a margin for a loaded machine.
    ENDED_WELL_WAIT_SEC = 5.0

    def __init__(self, job, plan, script):
        self.script = script
        self.job = job
        self.ended_by: Exception | None = None
        self.ended_with_stacks = None  # ended_by, reported with the stacks of this host's script then
        self.ended_well: list[str] = []
        self._done = threading.Event()
        for host in plan.hosts:
            if host != job.current_host:
                threading.Thread(target=self._follow, args=(job.current_host, host), daemon=True,
                                 name=f"watch-{host}").start()

    def _follow(self, me: str, host: str) -> None:
        try:
            if peers.follow_until(self._done, host, me, host):
                self.ended_well.append(host)
        except (PeerLost, Stopped) as err:
            if not self._done.is_set() and self.ended_by is None:
                self.ended_by = err
                log.error("%s: ending this host's script", err)
                self.ended_with_stacks = stacks.failed_with_stacks(self.job, err, [self.script.process.pid])
                self.script.end(grace_sec=10.0)

    def script_that_ended_well(self, plan) -> str:
        """The script process (its name: "rank 1 on algo-2") of the first other host whose
        part ended well, heard within ENDED_WELL_WAIT_SEC; "" when none did."""
        deadline = time.monotonic() + self.ENDED_WELL_WAIT_SEC
        while not self.ended_well and self.ended_by is None and time.monotonic() < deadline:
            time.sleep(0.2)  # a host that failed instead (ended_by) is named by its own reason
        if not self.ended_well:
            return ""
        host = self.ended_well[0]
        return next((p.name for p in plan.on_host(host) if p.role != "ps"), f"the script on {host}")

    def stop(self) -> None:
        self._done.set()


def _end_with(job, process, script, code: int, stacks_at_kill: str = "", ended_first: str = "") -> None:
    if code == 0:
        return
    if script.stop_requested:
        reason = f"stopped by SIGTERM: script {job.entry_point.program} ({process.name}) {supervise.how_it_ended(code)}"
        write_failure(job.output_dir, reason, stacks_at_kill)
        raise AlreadyReported(EXIT_STOPPED if code < 0 else code)
    report_script_failure(job, process.name, supervise.how_it_ended(code), script.output_tail, ended_first=ended_first)
    raise AlreadyReported(exit_code_of(code))


# Beyond the workers' grace: the time a worker host takes to stop its script and say so.
WORKERS_END_MARGIN_SEC = 20.0


def _serve_the_workers_to_their_end(job) -> None:
    """The master's script has ended well: say so (the workers' grace starts), and keep this
    host's PS task serving until every worker host has ended its part (their scripts may
    still need it for their last steps), within their grace."""
    status = peers.serving()
    if status is None:
        return
    status.finish(peers.DONE)
    bound = job.hyperparameters.ps_worker_grace_sec + WORKERS_END_MARGIN_SEC
    peers.wait_for_the_others_to_end(status, bound, setting="ps_worker_grace_sec")


def _serve_until_leader_ends(job, plan, process, script, ps_task) -> None:
    """A worker host of a parameter-server job: its script and PS task run until the first
    host's state is final; a script or PS task that fails first fails the host. Then, as in
    AWS's container, the script may end by itself (an Estimator's worker returns once it
    sees the last step) within ps_worker_grace_sec; one still running then (a TF 2 worker
    serves until stopped) is stopped, which is this host's normal end."""
    def alive():
        code = script.process.poll()
        if code not in (None, 0):
            _end_with(job, process, script, code)
        status = peers.serving()
        if code == 0 and status is not None:  # a master still retrying it learns that it has gone
            status.publish(peers.SCRIPT_ENDED, "exit code 0")
        if ps_task is not None and ps_task.poll() is not None:
            raise JobError(f"ps task on {job.current_host} {supervise.how_it_ended(ps_task.returncode)}")

    try:
        supervise.follow_leader(job, plan, f"the master on {plan.leader}", alive=alive, on_stop=script.terminate)
    except (JobError, PeerLost, Stopped) as err:
        if script.process.poll() is not None:
            raise
        # The master failed or stopped (or this host's PS task did): where this host's script was.
        raise stacks.failed_with_stacks(job, err, [script.process.pid]) from err
    grace = job.hyperparameters.ps_worker_grace_sec
    program = job.entry_point.program
    running = script.process.poll() is None
    if running:
        log.info("the master on %s has ended: script %s (%s) may end by itself within %.0f s (ps_worker_grace_sec)",
                 plan.leader, program, process.name, grace)
    ended_at = time.monotonic()
    code = script.wait(timeout=grace)
    if code is None:
        log.info("script %s (%s) still running %.0f s after the master's script ended: stopping it and this host's "
                 "PS task (ps_worker_grace_sec; a TF 2 worker serves until stopped)", program, process.name, grace)
        return
    if running:
        log.info("script %s (%s) ended by itself %.1f s after the master's script", program, process.name,
                 time.monotonic() - ended_at)
    _end_with(job, process, script, code)


def warn_if_no_model(model_dir: str, entry_point=None) -> None:
    """The toolkit's warning: a model dir with nothing in it uploads nothing; one without a
    numbered SavedModel is not servable by SageMaker's TF Serving containers. A script that
    also defines hooks and wrote nothing may have been meant as hooks: say how."""
    files = [os.path.join(folder, name) for folder, _, names in os.walk(model_dir) for name in names]
    if not files:
        meant_as_hooks = (f"; {entry_point.program} defines {', '.join(entry_point.hooks)}: if it is a module of "
                          "hooks for the container to train, set the hyperparameter entry_point_kind=hooks"
                          if entry_point is not None and entry_point.hooks else "")
        log.warning("the script wrote no model under SM_MODEL_DIR (%s): the job will upload none; save it "
                    "there, e.g. model.save(os.path.join(os.environ['SM_MODEL_DIR'], '1'))%s", model_dir,
                    meant_as_hooks)
    elif not any(os.path.basename(f).startswith("saved_model.pb") and os.path.basename(os.path.dirname(f)).isdigit()
                 for f in files):
        log.warning("the model under SM_MODEL_DIR (%s) is not a SavedModel in a numbered folder (<dir>/1/"
                    "saved_model.pb): SageMaker's TensorFlow Serving containers cannot serve it", model_dir)
