"""CPU settings (P17): derived from the job's CPUs, each overridable, precedence clear."""
import pytest

from trainer.cpu import settings as cpu
from trainer.contract.hyperparameters import parse_hyperparameters


@pytest.mark.parametrize("cpus, cores, processes, hyper, environ, expected", [
    # defaults from the machine, per process: intra = vCPUs - 1, OMP = physical cores - 1
    # (one left to the input pipeline), at least 1
    (8, 4, 1, {}, {}, dict(intra_op_threads=7, inter_op_threads=2, omp_num_threads=3,
                          kmp_affinity="granularity=fine,compact,1,0", kmp_blocktime=1, kmp_settings=False)),
    (2, 2, 1, {}, {}, dict(intra_op_threads=1, inter_op_threads=2, omp_num_threads=1,
                          kmp_affinity="disabled")),  # one OpenMP thread: nothing to place
    (1, 1, 1, {}, {}, dict(intra_op_threads=1, inter_op_threads=1, omp_num_threads=1)),
    (96, 48, 4, {}, {}, dict(intra_op_threads=23, omp_num_threads=11)),
    (4, 2, 8, {}, {}, dict(intra_op_threads=1, omp_num_threads=1)),
    # the image's ENV beats the defaults
    (8, 4, 1, {}, {"OMP_NUM_THREADS": "3", "KMP_AFFINITY": "disabled", "KMP_BLOCKTIME": "0", "KMP_SETTINGS": "1"},
     dict(omp_num_threads=3, kmp_affinity="disabled", kmp_blocktime=0, kmp_settings=True)),
    (8, 4, 1, {}, {"OMP_NUM_THREADS": "many"}, dict(omp_num_threads=3)),
    # hyperparameters beat both
    (8, 4, 1, {"intra_op_threads": "6", "inter_op_threads": "1", "omp_num_threads": "5",
               "kmp_affinity": "verbose,disabled", "kmp_blocktime": "200", "kmp_settings": "true"},
     {"OMP_NUM_THREADS": "3", "KMP_AFFINITY": "disabled"},
     dict(intra_op_threads=6, inter_op_threads=1, omp_num_threads=5, kmp_affinity="verbose,disabled",
          kmp_blocktime=200, kmp_settings=True)),
    (8, 4, 1, {"intra_op_threads": "auto"}, {}, dict(intra_op_threads=7)),
])
def test_decide(cpus, cores, processes, hyper, environ, expected):
    settings = cpu.decide(parse_hyperparameters(hyper), cpus, cores, processes, environ)
    for key, value in expected.items():
        assert getattr(settings, key) == value, key


def test_sources_are_reported():
    settings = cpu.decide(parse_hyperparameters({"intra_op_threads": "3"}), 4, 2, 1, {"KMP_AFFINITY": "disabled"})
    text = settings.describe()
    assert "intra_op_threads=3(hyperparameter)" in text
    assert "KMP_AFFINITY=disabled(environment)" in text
    assert "OMP_NUM_THREADS=1(default)" in text


def test_a_build_without_openmp_is_said_to_read_only_its_thread_counts():
    settings = cpu.decide(parse_hyperparameters({}), 4, 2, 1, {})
    assert "reads only" not in settings.describe()
    assert settings.describe(openmp=False).startswith(settings.describe() + "; this TensorFlow build reads only "
                                                      "intra_op_threads and inter_op_threads")


def test_environment_variables():
    settings = cpu.decide(parse_hyperparameters({"kmp_blocktime": "5"}), 4, 2, 1, {})
    assert settings.environment() == {"OMP_NUM_THREADS": "1", "KMP_AFFINITY": "disabled",
                                      "KMP_BLOCKTIME": "5", "KMP_SETTINGS": "0"}


@pytest.mark.parametrize("flags, supported", [
    ({"avx", "avx2", "fma"}, False),  # AMD EPYC before Zen 4: oneDNN has no bfloat16 kernels
    ({"avx2", "avx512f", "avx512bw", "avx512vl", "avx512dq"}, True),  # Skylake-SP and later
    ({"avx2", "avx512f"}, False),  # Xeon Phi: AVX-512 without the core subsets
])
def test_bfloat16_needs_avx512_core(flags, supported):
    from trainer.cpu.settings import bfloat16_supported

    assert bfloat16_supported(frozenset(flags)) is supported


@pytest.mark.parametrize("cpus, hyperparameters, threads", [
    (1, {}, (2, 1)),    # one CPU: a second inter-op thread, or a worker's calls never run (deadlock)
    (8, {}, (8, 8)),    # TensorFlow's own sizing, a thread per CPU
    (8, {"inter_op_threads": "3", "intra_op_threads": "5"}, (3, 5)),  # the job's own, which servers now read
    (8, {"inter_op_threads": "1"}, (2, 8)),  # never fewer than the two a worker's calls need
])
def test_a_parameter_server_task_s_server_threads(cpus, hyperparameters, threads):
    from trainer.modes.parameter_server import server_threads

    settings = cpu.decide(parse_hyperparameters(hyperparameters), cpus, cpus)
    assert server_threads(settings, cpus) == threads
