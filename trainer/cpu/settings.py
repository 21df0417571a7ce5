"""CPU settings (P17): threads and Intel OpenMP knobs, derived from the job, overridable.

intel-tensorflow runs oneDNN on Intel OpenMP, which reads OMP_NUM_THREADS, KMP_AFFINITY,
KMP_BLOCKTIME and KMP_SETTINGS once, when TensorFlow loads: `apply_environment` must run
before TensorFlow is imported, `apply_tensorflow_threads` right after. Stock TensorFlow (the
2.21 line) loads no OpenMP runtime and reads only the thread counts; the variables are still
exported there, as AWS's images export them (docs/performance.md, "CPU settings on each line").

Precedence for each setting: hyperparameter > the process environment (e.g. the image's
defaults, container/environment) > a default derived from the job's CPUs.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from trainer.tf_line import installed

log = logging.getLogger(__name__)

DEFAULT_KMP_AFFINITY = "granularity=fine,compact,1,0"
DEFAULT_KMP_BLOCKTIME = 1
DEFAULT_INTER_OP_THREADS = 2


@dataclass(frozen=True)
class CpuSettings:
    intra_op_threads: int
    inter_op_threads: int
    omp_num_threads: int
    kmp_affinity: str
    kmp_blocktime: int
    kmp_settings: bool
    sources: dict  # setting -> "hyperparameter" | "environment" | "default"

    def environment(self) -> dict[str, str]:
        return {
            "OMP_NUM_THREADS": str(self.omp_num_threads),
            "KMP_AFFINITY": self.kmp_affinity,
            "KMP_BLOCKTIME": str(self.kmp_blocktime),
            "KMP_SETTINGS": "1" if self.kmp_settings else "0",
        }

    def describe(self, openmp: bool = True) -> str:
        """`openmp`: whether this TensorFlow build reads the OpenMP variables (trainer.tf_line)."""
        values = {
            "intra_op_threads": self.intra_op_threads,
            "inter_op_threads": self.inter_op_threads,
            "OMP_NUM_THREADS": self.omp_num_threads,
            "KMP_AFFINITY": self.kmp_affinity,
            "KMP_BLOCKTIME": self.kmp_blocktime,
            "KMP_SETTINGS": int(self.kmp_settings),
        }
        described = " ".join(f"{key}={value}({self.sources[key]})" for key, value in values.items())
        return described if openmp else (described + "; this TensorFlow build reads only intra_op_threads and "
                                         "inter_op_threads: the OMP_*/KMP_* values are exported as AWS's image "
                                         "exports them, for OpenMP libraries a script loads")


def decide(hp, num_cpus: int, num_physical_cores: int, processes_per_host: int = 1,
           environ: dict | None = None) -> CpuSettings:
    """Pure: the settings for one of `processes_per_host` processes sharing the host (`hp`
    None: no hyperparameters, as for a process the image's `train` did not start)."""
    environ = os.environ if environ is None else environ
    explicit = hp.explicit if hp is not None else frozenset()
    vcpus = max(1, num_cpus // processes_per_host)
    cores = max(1, num_physical_cores // processes_per_host)
    # One vCPU (and core) is left to the input pipeline and the runtime's own threads: the
    # step's ops are small (batch x a few hundred), and threads that fight tf.data for the
    # CPUs cost more than they add (`trainer tune` on 2 vCPUs, the real pipeline: intra 1 /
    # OMP 1 ran 1.25x the speed of intra 2 / OMP 2).
    compute_vcpus, compute_cores = max(1, vcpus - 1), max(1, cores - 1)
    sources = {}

    def pick(key, hp_name, env_name, default, convert=int):
        hp_value = hp[hp_name] if hp_name in explicit else None
        if hp_value is not None:
            sources[key] = "hyperparameter"
            return hp_value
        if env_name and environ.get(env_name, "").strip():
            try:
                value = convert(environ[env_name])
                sources[key] = "environment"
                return value
            except ValueError:
                log.warning("ignoring %s=%r: not valid", env_name, environ[env_name])
        sources[key] = "default"
        return default

    omp_num_threads = pick("OMP_NUM_THREADS", "omp_num_threads", "OMP_NUM_THREADS", compute_cores)
    return CpuSettings(
        intra_op_threads=pick("intra_op_threads", "intra_op_threads", None, compute_vcpus),
        inter_op_threads=pick("inter_op_threads", "inter_op_threads", None,
                              min(DEFAULT_INTER_OP_THREADS, vcpus)),
        omp_num_threads=omp_num_threads,
        # With one OpenMP thread there is nothing to place, and compact affinity only pins
        # the process's main thread to one core, beside the threads it feeds: a Keras
        # script reading with tf.data ran 8% faster with it off (`bench scripts`'s script,
        # 2 vCPUs, three runs each); the built-in model's step did not change.
        kmp_affinity=pick("KMP_AFFINITY", "kmp_affinity", "KMP_AFFINITY",
                          DEFAULT_KMP_AFFINITY if omp_num_threads > 1 else "disabled", str),
        kmp_blocktime=pick("KMP_BLOCKTIME", "kmp_blocktime", "KMP_BLOCKTIME", DEFAULT_KMP_BLOCKTIME),
        kmp_settings=pick("KMP_SETTINGS", "kmp_settings", "KMP_SETTINGS", False,
                          lambda text: text.strip().lower() not in ("0", "false", "")),
        sources=sources,
    )


def physical_cores(cpus: set[int]) -> int:
    """Physical cores among the CPUs we may use (hyper-thread siblings count once)."""
    cores = set()
    for cpu in cpus:
        path = f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list"
        try:
            with open(path) as f:
                cores.add(f.read().strip())
        except OSError:
            cores.add(str(cpu))
    return max(1, len(cores))


def apply_environment(settings: CpuSettings) -> None:
    """Export the OpenMP variables; call before TensorFlow is imported."""
    os.environ.update(settings.environment())
    log.info("CPU settings: %s", settings.describe(installed().openmp))


def apply_tensorflow_threads(settings: CpuSettings) -> None:
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(settings.intra_op_threads)
    tf.config.threading.set_inter_op_parallelism_threads(settings.inter_op_threads)


# oneDNN runs bfloat16 on AVX-512 (avx512_core: it converts in registers where the CPU has no
# native bfloat16); on a CPU with AVX2 only (AMD EPYC before Zen 4, older Intel) it has no
# bfloat16 kernels and aborts the process when a layer asks for one.
BFLOAT16_FLAGS = frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq"})


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> frozenset:
    try:
        with open(cpuinfo) as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def bfloat16_supported(flags: frozenset | None = None) -> bool:
    """Whether oneDNN can run bfloat16 layers on this CPU."""
    return BFLOAT16_FLAGS <= (cpu_flags() if flags is None else flags)

