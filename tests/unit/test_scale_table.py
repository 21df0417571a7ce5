"""`trainer bench scale`'s table: every case gets a row, whichever of them failed."""
import pytest

from trainer.bench import scale

BASELINE = {"case": "1 host x 1 CPU, single", "hosts": 1, "cpus_per_host": 1, "mode": "single", "exit_code": 0,
            "train_samples_per_sec": 30000.0, "eval_auc": 0.75}
HOROVOD = {"case": "2 hosts x 1 CPU, horovod", "hosts": 2, "cpus_per_host": 1, "mode": "horovod", "exit_code": 0,
           "train_samples_per_sec": 36000.0, "eval_auc": 0.76}
FAILED = {"case": "2 hosts x 1 CPU, parameter_server", "hosts": 2, "cpus_per_host": 1, "mode": "parameter_server",
          "exit_code": 1}


def compared(row: dict, baseline: dict) -> dict:
    speedup = row["train_samples_per_sec"] / baseline["train_samples_per_sec"]
    return {**row, "speedup": speedup, "efficiency": speedup / (row["hosts"] * row["cpus_per_host"]),
            "eval_auc_change": row["eval_auc"] - baseline["eval_auc"]}


CASES = {
    "all ran": ([compared(BASELINE, BASELINE), compared(HOROVOD, BASELINE)],
                ["1 host x 1 CPU, single | 30,000 | 1.00x | 100% | 0.7500 | +0.0000",
                 "2 hosts x 1 CPU, horovod (the planner's choice) | 36,000 | 1.20x | 60% | 0.7600 | +0.0100"]),
    "a scaled-out case failed": ([compared(BASELINE, BASELINE), FAILED],
                                 ["2 hosts x 1 CPU, parameter_server | failed (exit 1) | | | | |"]),
    "the baseline failed": ([{**BASELINE, "exit_code": 1, "train_samples_per_sec": None}, HOROVOD],
                            ["2 hosts x 1 CPU, horovod (the planner's choice) | 36,000 | | | 0.7600 |"]),
}


@pytest.mark.parametrize("case", CASES)
def test_every_case_has_its_row(case):
    rows, expected_lines = CASES[case]
    rows = [{key: value for key, value in row.items() if value is not None} for row in rows]  # None: not measured
    result = {"rows": rows, "planners_choice": "horovod", "train_rows": 1000, "feature_size": 10, "epochs": 1}
    lines = scale.table(result).splitlines()
    for line in expected_lines:
        assert line in lines, "\n".join(lines)
    assert [line.split(" | ")[0].removesuffix(" (the planner's choice)") for line in lines[2:2 + len(rows)]] == \
        [row["case"] for row in rows]


def test_the_probe_s_prediction_is_checked_against_the_measured_cases():
    rows = [compared(BASELINE, BASELINE), compared(HOROVOD, BASELINE)]
    prediction = {"mode": "horovod", "samples_per_sec": 45000.0, "speedup": 1.5,
                  "one_host_samples_per_sec": 30000.0}
    checked = scale.checked(prediction, rows)
    assert checked["measured_speedup"] == pytest.approx(1.2)
    assert checked["speedup_error"] == pytest.approx(0.25)  # 1.5 predicted, 1.2 measured
    assert checked["samples_per_sec_error"] == pytest.approx(0.25)  # 45,000 against 36,000
    assert checked["one_host_error"] == pytest.approx(0.0)
    result = {"rows": rows, "planners_choice": "horovod", "train_rows": 1000, "feature_size": 10, "epochs": 1,
              "predictions": [checked]}
    assert scale.table(result).splitlines()[-1] == (
        "`trainer plan --probe` predicted 45,000 samples/s for 2 hosts x 1 CPU with horovod, 1.50x one host; "
        "measured 1.20x (error of the speed-up +25%, of the samples/s +25%).")


def test_the_prediction_is_checked_against_its_own_modes_case_only():
    local_sgd = {**HOROVOD, "case": "2 hosts x 1 CPU, local_sgd", "mode": "local_sgd", "train_samples_per_sec": 54000.0}
    rows = [compared(BASELINE, BASELINE), compared(HOROVOD, BASELINE), compared(local_sgd, BASELINE)]
    prediction = {"mode": "local_sgd", "samples_per_sec": 45000.0, "speedup": 1.5, "one_host_samples_per_sec": 30000.0}
    assert scale.checked(prediction, rows)["measured_speedup"] == pytest.approx(1.8)


def test_a_failed_horovod_case_leaves_the_prediction_unchecked():
    checked = scale.checked({"mode": "horovod", "samples_per_sec": 45000.0, "speedup": 1.5,
                  "one_host_samples_per_sec": 30000.0},
                            [compared(BASELINE, BASELINE), {**HOROVOD, "train_samples_per_sec": None}])
    assert "measured_speedup" not in checked and checked["one_host_error"] == pytest.approx(0.0)


def test_a_case_s_row_is_its_median_round_and_fails_with_any_round():
    case = ("2 hosts x 1 CPU, local_sgd", 2, 1, "local_sgd")
    metrics = [{"train_samples_per_sec": rate, "eval_auc": 0.76, "steps": 10, "world_size": 2}
               for rate in (40000.0, 52000.0, 47000.0)]
    row = scale.row_of(case, [(0, m) for m in metrics])
    assert row["train_samples_per_sec"] == 47000.0 and row["samples_per_sec_by_round"] == [40000.0, 52000.0, 47000.0]
    assert row["exit_code"] == 0 and row["eval_auc"] == 0.76 and row["mode"] == "local_sgd"
    failed = scale.row_of(case, [(0, metrics[0]), (1, None), (0, metrics[2])])
    assert failed["exit_code"] == 1 and "train_samples_per_sec" not in failed
    result = {"rows": [compared(BASELINE, BASELINE)], "planners_choice": "local_sgd", "train_rows": 1000,
              "feature_size": 10, "epochs": 1, "rounds": 3}
    assert "Samples/s: each case's median of 3 rounds, the cases alternating." in scale.table(result)


def test_a_mode_s_probes_of_several_rounds_are_checked_at_their_median():
    rates_and_one_hosts = ((50000.0, 25000.0), (60000.0, 40000.0), (54000.0, 30000.0))
    rounds = [{"mode": "local_sgd", "samples_per_sec": rate, "speedup": rate / one_host,
               "one_host_samples_per_sec": one_host} for rate, one_host in rates_and_one_hosts]
    median = scale.median_prediction(rounds)
    assert median["samples_per_sec"] == 54000.0 and median["one_host_samples_per_sec"] == 30000.0
    assert median["speedup"] == pytest.approx(1.8) and median["rounds"] == 3
    assert median["speedup_by_round"] == pytest.approx([2.0, 1.5, 1.8])
    local_sgd = {**HOROVOD, "case": "2 hosts x 1 CPU, local_sgd", "mode": "local_sgd", "train_samples_per_sec": 54000.0}
    checked = scale.checked(median, [compared(BASELINE, BASELINE), compared(local_sgd, BASELINE)])
    assert checked["speedup_error"] == pytest.approx(0.0) and checked["probe_rounds"] == 3
    result = {"rows": [compared(BASELINE, BASELINE), compared(local_sgd, BASELINE)], "planners_choice": "local_sgd",
              "train_rows": 1000, "feature_size": 10, "epochs": 1, "rounds": 3, "predictions": [checked]}
    assert "1.80x one host (the median of 3 probes, one a round); measured 1.80x" in scale.table(result)


APART = {"case": "2 one-host jobs x 1 CPU at once, no exchange", "hosts": 2, "cpus_per_host": 1, "mode": "apart",
         "exit_code": 0, "train_samples_per_sec": 54000.0, "eval_auc": 0.75}
LOCAL_SGD = {**HOROVOD, "case": "2 hosts x 1 CPU, local_sgd", "mode": "local_sgd", "train_samples_per_sec": 48600.0}
CEILINGS = {  # rows -> (of_ceiling by case, the table's ceiling line or None)
    "measured": ([BASELINE, APART, LOCAL_SGD, HOROVOD],
                 {"2 hosts x 1 CPU, local_sgd": 0.9, "2 hosts x 1 CPU, horovod": 36000 / 54000},
                 "2 one-host jobs at once, each on a CPU of its own, trained 1.80x one host alone: the most 2 hosts "
                 "of 1 CPU reach on this machine with no exchange; local_sgd reached 90% of it."),
    "the ceiling failed": ([BASELINE, {**APART, "exit_code": 1, "train_samples_per_sec": None}, LOCAL_SGD], {}, None),
    "the chosen mode failed": ([BASELINE, APART, {**LOCAL_SGD, "exit_code": 1, "train_samples_per_sec": None}], {},
                               "2 one-host jobs at once, each on a CPU of its own, trained 1.80x one host alone: the "
                               "most 2 hosts of 1 CPU reach on this machine with no exchange."),
}


@pytest.mark.parametrize("case", CEILINGS)
def test_each_mode_is_read_against_two_one_host_jobs_at_once(case):
    rows, of_ceiling, line = CEILINGS[case]
    rows = [{key: value for key, value in row.items() if value is not None} for row in rows]
    scale.against_the_baseline(rows)
    assert {row["case"]: row["of_ceiling"] for row in rows if "of_ceiling" in row} == pytest.approx(of_ceiling)
    assert all(row["speedup"] == pytest.approx(row["train_samples_per_sec"] / 30000.0) for row in rows
               if "train_samples_per_sec" in row)
    result = {"rows": rows, "planners_choice": "local_sgd", "train_rows": 1000, "feature_size": 10, "epochs": 1}
    lines = scale.table(result).splitlines()
    assert [text for text in lines if text.startswith("2 one-host jobs at once")] == ([line] if line else []), \
        "\n".join(lines)
