"""The tuner's decisions: which values it tries, how the search moves, what it keeps."""
import pytest

from trainer.bench import cpu_settings
from trainer.measure import tune
from trainer.cpu.settings import DEFAULT_KMP_AFFINITY

START = {"intra_op_threads": 2, "inter_op_threads": 2, "omp_num_threads": 1,
         "kmp_affinity": DEFAULT_KMP_AFFINITY, "kmp_blocktime": 1}


@pytest.mark.parametrize("cpus, cores, intra, inter, omp", [
    (2, 1, [1, 2], [1, 2], [1, 2]),
    (8, 4, [4, 8], [1, 2, 4], [1, 4, 8]),
    (96, 48, [48, 96], [1, 2, 4], [1, 48, 96]),
    (1, 1, [1], [1, 2], [1]),
])
def test_values_tried_follow_the_host(cpus, cores, intra, inter, omp):
    values = dict(tune.knobs(cpus, cores))
    assert values["intra_op_threads"] == intra and values["inter_op_threads"] == inter
    assert values["omp_num_threads"] == omp
    assert values["kmp_affinity"] == [DEFAULT_KMP_AFFINITY, "disabled"] and values["kmp_blocktime"] == [0, 1, 200]


@pytest.mark.parametrize("cpus, cores", [(2, 1), (96, 48)])
def test_a_build_without_openmp_is_searched_on_its_thread_counts_alone(cpus, cores):
    assert dict(tune.knobs(cpus, cores, openmp=False)) == {
        name: values for name, values in tune.knobs(cpus, cores) if name in ("intra_op_threads", "inter_op_threads")}


@pytest.mark.parametrize("cpus, openmp, omp_read", [(2, True, True), (2, False, False), (1, True, True)])
def test_the_settings_benchmark_changes_one_setting_at_a_time(cpus, openmp, omp_read):
    start = {**START, "intra_op_threads": 1, "kmp_affinity": "disabled"}  # the defaults on 2 vCPUs
    cases = cpu_settings.cases(start, cpus, openmp)
    every_vcpu = max(2, cpus)
    changed = {name: {key for key in start if settings[key] != start[key]} | set(environment)
               for name, (settings, environment, _) in cases.items()}
    assert changed == {"default": set(), f"OMP_NUM_THREADS={every_vcpu}": {"omp_num_threads"},
                       f"OMP_NUM_THREADS={every_vcpu}, compact, KMP_BLOCKTIME=200":
                           {"omp_num_threads", "kmp_affinity", "kmp_blocktime"},
                       f"intra_op_threads={every_vcpu}": {"intra_op_threads"},
                       "inter_op_threads=1": {"inter_op_threads"}, "TF_ENABLE_ONEDNN_OPTS=0": {"TF_ENABLE_ONEDNN_OPTS"}}
    assert {name: read for name, (_, _, read) in cases.items() if name.startswith("OMP")} == {
        name: omp_read for name in cases if name.startswith("OMP")}


def rate_of(settings):
    """A made-up speed: more OpenMP threads and no binding are faster; blocktime 200 slower."""
    return (100 + 10 * settings["omp_num_threads"] + (5 if settings["kmp_affinity"] == "disabled" else 0)
            - (20 if settings["kmp_blocktime"] == 200 else 0))


def test_search_keeps_each_change_that_is_faster():
    best, trials = tune.search(rate_of, START, tune.knobs(2, 1), deadline=float("inf"))
    assert best == {**START, "omp_num_threads": 2, "kmp_affinity": "disabled"}
    assert trials[0] == (START, rate_of(START))
    assert len(trials) == 1 + 1 + 1 + 1 + 1 + 2  # the start, then each other value once


def test_search_stops_at_its_deadline():
    ticks = iter(range(100))
    best, trials = tune.search(rate_of, START, tune.knobs(2, 1), deadline=2, clock=lambda: next(ticks))
    assert len(trials) == 3  # the start and the trials begun before the clock read 2


@pytest.mark.parametrize("start_rate, best_rate, kept", [
    (100.0, 110.0, "best"),
    (100.0, 102.0, "start"),  # within the noise margin: the starting settings stay
    (100.0, 95.0, "start"),
])
def test_confirm_keeps_the_winner_only_by_a_margin(start_rate, best_rate, kept):
    best = {**START, "kmp_blocktime": 0}
    result, _, _ = tune.confirm(lambda s: best_rate if s == best else start_rate, START, best)
    assert result == (best if kept == "best" else START)


def test_probe_command_sets_openmp_in_the_environment():
    command, env = tune.probe_command({**START, "kmp_affinity": "disabled"}, batch_size=512, steps=50)
    assert env == {"OMP_NUM_THREADS": "1", "KMP_AFFINITY": "disabled", "KMP_BLOCKTIME": "1", "KMP_SETTINGS": "0"}
    assert command[1:] == ["-m", "trainer", "tune", "probe", "--intra", "2", "--inter", "2", "--steps", "50",
                           "--batch-size", "512"]


def test_probe_command_asks_for_cached_batches_when_told():
    command, _ = tune.probe_command(START, steps=300, cached=True)
    assert command[-3:] == ["--steps", "300", "--cached"]
    assert "--cached" not in tune.probe_command(START)[0]


@pytest.mark.parametrize("names, expected", [
    ("", ["default", "a, b", "c"]),         # none named: every case
    ("c", ["default", "c"]),                # the default always, to compare with
    ("a, b; c", ["default", "a, b", "c"]),  # ';' separates names that hold commas
])
def test_bench_settings_measures_the_cases_asked_for(names, expected):
    assert list(cpu_settings.chosen({"default": 0, "a, b": 1, "c": 2}, names)) == expected


def test_bench_settings_refuses_a_case_it_does_not_know():
    with pytest.raises(SystemExit, match="no case named d; choose among: default; c"):
        cpu_settings.chosen({"default": 0, "c": 2}, "d")
