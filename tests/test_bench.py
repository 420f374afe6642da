"""`course bench`: the single-device vs distributed benchmark (course_utils.tools.bench).

The benchmark runs in fresh processes (simulated devices are fixed per process). No test asserts
a speed: timings depend on the machine and its load. They check what a user relies on: the
command finishes, prints the table and the ratios, writes complete JSON whose ratios follow from
its own measurements, and refuses bad options with a clear message.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

import pytest

from conftest import ROOT

COURSE = [sys.executable, "-m", "course_utils.tools.cli"]
CONFIGURATIONS_2 = [
    "no strategy + fit",
    "MirroredStrategy(1) + fit",
    "MirroredStrategy(2) + fit",
    "MirroredStrategy(2) + custom loop, 1 step/call",
    "MirroredStrategy(2) + custom loop, 20 steps/call",
]


def _course(*args: str, devices: int = 2, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "COURSE_DEVICES": str(devices), "COURSE_DATA": "synthetic"}
    return subprocess.run(
        [*COURSE, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory):
    output = tmp_path_factory.mktemp("bench") / "bench.json"
    proc = _course("bench", "--quick", "--output", str(output))
    assert proc.returncode == 0, (
        f"course bench --quick failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return proc, json.loads(output.read_text())


@pytest.mark.slow
def test_quick_bench_writes_every_configuration_with_positive_numbers(quick_report):
    _, report = quick_report
    assert report["device"] == "CPU" and report["replicas"] == 2
    assert report["global_batch"] == 64 * 2
    assert [c["name"] for c in report["configurations"]] == CONFIGURATIONS_2
    for config in report["configurations"]:
        assert len(config["rounds"]) == report["rounds"] >= 1, config["name"]
        assert all(value > 0 for value in config["rounds"]), config["name"]
        assert config["examples_per_sec"] == pytest.approx(statistics.median(config["rounds"]))
        assert config["step_ms"] == pytest.approx(
            1000 * config["batch_size"] / config["examples_per_sec"]
        )
        assert config["warmup_seconds"] > 0
    wait = report["input_wait"]
    assert wait["step_ms"] > 0 and wait["free_input_step_ms"] > 0
    assert len(wait["rounds"]) == report["rounds"]


@pytest.mark.slow
def test_quick_bench_ratios_follow_from_its_own_rounds(quick_report):
    _, report = quick_report
    rounds = {c["name"]: c["rounds"] for c in report["configurations"]}

    def paired(top: str, bottom: str) -> float:
        return statistics.median(a / b for a, b in zip(rounds[top], rounds[bottom]))

    ratios = report["ratios"]
    assert ratios["custom_loop_vs_fit"] == pytest.approx(
        paired(CONFIGURATIONS_2[4], CONFIGURATIONS_2[2])
    )
    assert ratios["classic_loop_vs_fit"] == pytest.approx(
        paired(CONFIGURATIONS_2[3], CONFIGURATIONS_2[2])
    )
    assert ratios["mirrored1_vs_no_strategy"] == pytest.approx(
        paired(CONFIGURATIONS_2[1], CONFIGURATIONS_2[0])
    )
    assert ratios["mirrored2_vs_no_strategy"] == pytest.approx(
        paired(CONFIGURATIONS_2[2], CONFIGURATIONS_2[0])
    )
    assert ratios["input_wait_percent"] == pytest.approx(
        statistics.median(report["input_wait"]["rounds"])
    )
    targets = {row["measure"]: row for row in report["targets"]}
    assert set(targets) == {"custom_loop_vs_fit", "mirrored1_vs_no_strategy", "input_wait_percent"}
    for name, row in targets.items():
        expected = (
            ratios[name] <= 5.0
            if name == "input_wait_percent"
            else ratios[name] >= float(row["target"].split()[1])
        )
        assert row["met"] is expected, row


@pytest.mark.slow
def test_quick_bench_prints_the_table_and_the_ratios(quick_report):
    proc, report = quick_report
    for name in CONFIGURATIONS_2:
        assert name in proc.stdout
    for line in (
        "custom_loop_vs_fit",
        "mirrored1_vs_no_strategy",
        "input_wait_percent",
        "this measures overhead, not speed-up",
    ):
        assert line in proc.stdout
    assert "Traceback" not in proc.stderr


def test_bad_options_get_a_clear_error():
    proc = _course("bench", "--repeats", "0")
    assert proc.returncode == 2
    assert "--repeats must be at least 1" in proc.stderr


@pytest.mark.slow
def test_asking_for_more_replicas_than_devices_says_what_to_do(python_subprocess):
    proc = python_subprocess(
        """
        import course_utils
        course_utils.setup(devices=2, verbose=False)
        from course_utils.tools import bench
        try:
            bench.make_strategy(4)
        except ValueError as error:
            print("ERROR:", error)
        """,
        env={"COURSE_DATA": "synthetic"},
    )
    assert "ERROR: 4 replicas asked for, but this kernel has 2 logical device(s)" in proc.stdout
    assert "COURSE_DEVICES=4" in proc.stdout
