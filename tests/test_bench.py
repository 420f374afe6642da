"""`course bench`: the single-device vs distributed benchmark (course_tools.bench).

The benchmark measures each replica count in a fresh process. No test asserts a speed: timings
depend on the machine and its load. They check what a user relies on: the command finishes, prints
the tables and the verdicts, writes complete JSON whose verdicts and targets follow from its own
rounds, uses no private TensorFlow attribute, and refuses bad options with a clear message.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

import pytest
from helpers import ROOT, assert_conclusions_consistent

COURSE = [sys.executable, "-m", "course_tools.cli"]
CONFIGURATIONS = {
    "1": [
        "no strategy + fit",
        "MirroredStrategy(1) + fit",
        "MirroredStrategy(1) + custom loop, 1 step/call",
        "MirroredStrategy(1) + custom loop, 5 steps/call",
    ],
    "2": [
        "no strategy + fit",
        "MirroredStrategy(2) + fit",
        "MirroredStrategy(2) + custom loop, 1 step/call",
        "MirroredStrategy(2) + custom loop, 5 steps/call",
    ],
}


def _course(*args: str, devices: int = 2, timeout: float = 600) -> subprocess.CompletedProcess:
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
def test_quick_bench_measures_every_configuration_per_replica_count(quick_report):
    _, report = quick_report
    assert report["replicas"] == [1, 2] and report["devices"] == 2
    rounds = report["sizes"]["rounds"]
    for n, names in CONFIGURATIONS.items():
        rows = report["configurations"][n]
        assert [row["name"] for row in rows] == names
        for row in rows:
            assert row["batch_size"] == 64 * int(n), row["name"]
            assert len(row["rounds"]) == rounds >= 2 and min(row["rounds"]) > 0, row["name"]
            assert row["examples"] == report["sizes"]["steps"] * rounds * row["batch_size"]
            assert row["warmup_seconds"] > 0


@pytest.mark.slow
def test_quick_bench_verdicts_and_targets_follow_from_its_rounds(quick_report, tmp_path):
    _, report = quick_report
    verdicts = report["comparisons"]
    assert set(verdicts) == {
        "mirrored1_vs_no_strategy",
        "mirrored2_vs_no_strategy",
        "custom_loop_vs_fit",
        "classic_loop_vs_fit",
        "steps_per_call",
    }
    rows = {n: {r["name"]: r["rounds"] for r in rs} for n, rs in report["configurations"].items()}
    fit = verdicts["custom_loop_vs_fit"]
    assert fit["a_samples"] == rows["2"][CONFIGURATIONS["2"][3]]
    assert fit["b_samples"] == rows["2"][CONFIGURATIONS["2"][1]]
    assert verdicts["mirrored1_vs_no_strategy"]["b_samples"] == rows["1"]["no strategy + fit"]
    path = tmp_path / "conclusions.json"
    path.write_text(json.dumps(list(verdicts.values())))
    assert_conclusions_consistent(path)  # every word and percentage re-derived from the rounds
    targets = {row["measure"]: row for row in report["targets"]}
    assert set(targets) == {"custom_loop_vs_fit", "mirrored1_vs_no_strategy"}
    for name, row in targets.items():
        ratio = statistics.median(verdicts[name]["a_samples"]) / statistics.median(
            verdicts[name]["b_samples"]
        )
        assert row["value"] == pytest.approx(ratio, abs=1e-3)
        from course_utils import timing

        goal = float(row["target"].split()[1])
        if verdicts[name]["busy"]:  # notebook 3's rule: a busy machine's ratio is not judged
            assert row["met"] is None and verdicts[name]["busy"] > timing.BUSY, row
            assert row["note"] == "busy", row
        elif ratio >= goal:
            assert row["met"] is True, row
        elif verdicts[name]["word"] == "slower":  # below the goal, and slower by the noise rule
            assert row["met"] is False, row
        else:  # below the goal, but the rounds cannot tell the two runs apart
            assert row["met"] is None and row["note"] == "within noise", row


@pytest.mark.slow
def test_quick_bench_reports_the_machine_s_roofline_figures(quick_report):
    proc, report = quick_report
    machine = report["machine"]
    assert 1e8 < machine["peak_flops"] < 1e15  # FLOP/s: from a slow laptop to a large GPU
    assert 1e8 < machine["memory_bandwidth"] < 1e13  # bytes/s
    reduce, model = machine["all_reduce"], machine["model"]
    assert reduce["replicas"] == 2 and len(reduce["sizes_bytes"]) >= 4
    assert 0 < reduce["alpha_seconds"] < 0.1 or reduce["beta_seconds_per_byte"] > 0
    assert reduce["others_share"] and all(0 <= s <= 1 for s in reduce["others_share"])
    from course_utils import timing

    assert reduce["busy"] == (max(reduce["others_share"]) > timing.BUSY)
    assert model["gradient_bytes"] == 4 * 121_930  # the notebook's CNN, float32
    assert 5 < model["intensity_flop_per_byte"] < 50
    assert "This machine (notebook 3b's roofline figures)" in proc.stdout
    assert (machine["ridge_flop_per_byte"] is None) == bool(machine["ridge_note"])
    assert (machine["ridge_note"] or "ridge ") in proc.stdout


@pytest.mark.slow
def test_quick_bench_prints_the_tables_and_the_verdicts(quick_report):
    proc, report = quick_report
    for names in CONFIGURATIONS.values():
        for name in names:
            assert name in proc.stdout
    from course_tools import bench

    for verdict in report["comparisons"].values():  # its sentence, or on a busy machine no verdict
        assert bench.verdict_line(verdict) in proc.stdout
    assert "Noise rule: Two runs differ only when their rounds do not overlap" in proc.stdout
    assert "logical devices sharing the same cores: a ratio here is not a speed-up" in proc.stdout
    assert "(quick's sizes, 3 rounds: a smoke test)" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_bench_runs_the_tagged_cells_of_notebook_3():
    # course bench must time what notebook 3 teaches: it runs the notebook's cells tagged
    # "bench", so the model, the pipeline, the trainers and `measure` are the notebook's own.
    from course_tools import bench

    code = bench.notebook_code()
    notebook = json.loads(bench.NOTEBOOK.read_text())
    tagged = [
        "".join(cell["source"])
        for cell in notebook["cells"]
        if "bench" in cell.get("metadata", {}).get("tags", [])
    ]
    for name in bench.NOTEBOOK_CODE:
        assert callable(code[name]), name
        keyword = "class" if name == "StepClock" else "def"
        assert any(f"{keyword} {name}(" in source for source in tagged), name
    assert code["make_model"]().count_params() > 100_000


def test_an_untagged_notebook_gets_a_clear_error(tmp_path):
    from course_tools import bench

    notebook = json.loads(bench.NOTEBOOK.read_text())
    for cell in notebook["cells"]:
        cell.get("metadata", {}).pop("tags", None)
    path = tmp_path / "03.ipynb"
    path.write_text(json.dumps(notebook))
    with pytest.raises(RuntimeError, match="no longer define make_model.*tag the cells"):
        bench.notebook_code(path)
    with pytest.raises(FileNotFoundError, match="missing"):
        bench.notebook_code(tmp_path / "absent.ipynb")


def test_the_benchmark_uses_no_private_tensorflow_attribute():
    source = (ROOT / "course_tools" / "bench.py").read_text()
    assert "tf.distribute.MirroredStrategy(devices[:replicas])" in source
    assert "._" not in source.replace("self._", "")


def test_bad_options_get_a_clear_error():
    proc = _course("bench", "--repeats", "0")
    assert (proc.returncode, proc.stderr.strip()) == (
        2,
        "course bench: --repeats must be at least 1 (got 0).",
    )
    proc = _course("bench", "--steps", "7", "--steps-per-call", "5")
    assert (proc.returncode, proc.stderr.strip()) == (
        2,
        "course bench: --steps (7) must be a multiple of --steps-per-call (5).",
    )


def test_notebook_3s_measure_warms_up_then_times_interleaved_rounds():
    from course_tools.bench import notebook_code

    measure = notebook_code()["measure"]  # notebook 3's own
    from course_utils import timing

    calls = []

    def train(name, seconds_per_step):
        def run(steps):
            calls.append((name, steps))
            time.sleep(seconds_per_step * steps)

        return run

    results = measure(
        {"slow": train("slow", 0.004), "fast": train("fast", 0.001)},
        steps=10,
        rounds=3,
        batch_size={"slow": 8, "fast": 16},
    )
    in_order, reversed_ = [("slow", 10), ("fast", 10)], [("fast", 10), ("slow", 10)]
    assert calls == in_order + in_order + reversed_ + in_order  # the warm-up, then 3 rounds,
    # each in the opposite order of the one before (with two runs, a rotation too)
    slow, fast = results
    assert len(slow.rounds) == 3 and slow.batch_size == 8 and slow.examples == 240
    assert slow.examples_per_sec == pytest.approx(statistics.median(slow.rounds))
    assert 1.0 < slow.step_ms < 40.0 and fast.examples_per_sec > slow.examples_per_sec
    assert slow.warmup_seconds >= 0.04
    table = timing.results_table(results)
    assert "rounds (low-high)" in table and "ms/step" in table
    assert timing.compare(fast, slow).word == "faster"


def test_the_machine_s_limits_get_notebook_3b_s_rule():
    """A limit is the fastest round of three sets (`verdict.limit_range`, the rule 3b's cells
    call): a fast set is not "disturbed", load only slows a round; the report shows the other
    sets' fastest beside it, and flags sets whose fastest rounds are over 1.5x apart (one slow
    round of the fast set cannot bridge them), the low end then the slowest set's (60, not 62:
    the set below the gap is inside the range); sets that agree get no flag."""
    from course_tools import bench

    sets = iter([[100e9, 40e9], [60e9], [62e9], [10e9]])
    limit = bench.measured_limit(lambda: next(sets))
    assert (limit["value"], limit["low"]) == (100e9, 60e9)
    assert next(sets) == [10e9]  # three sets, no fourth
    assert bench.limit_spreads({"peak": limit}) == [
        "  peak: at least 100.0 GFLOP/s (fastest round); the slowest set's fastest, across the "
        "gap 60.0 (60%)\n"
        "  FLAG: the sets disagree: their fastest rounds 1.67x apart (over 1.5x), whatever the "
        "load: read the peak at both ends"
    ]
    sets = iter([[100e9, 40e9], [80e9], [90e9]])
    assert "FLAG" not in bench.limit_spreads({"peak": bench.measured_limit(lambda: next(sets))})[0]


def test_a_set_of_a_limit_that_ran_starved_is_flagged():
    """As 3b's cells, each set's rounds come with the cores' worth each got (`rates_in_rounds`):
    a set whose fastest round got under `verdict.STARVED` of the usable CPUs' worth is listed
    and flagged (the limit may be low); sets that got the cores, or none recorded, are not."""
    from course_tools import bench
    from course_utils import timing, verdict

    usable = timing.usable_cpus()
    full, starved = [usable] * 2, [0.5 * verdict.STARVED * usable] * 2
    sets = iter([([100e9, 90e9], starved), ([95e9], full), ([96e9, 20e9], full)])
    limit = bench.measured_limit(lambda: next(sets))
    assert limit["starved"] == ["set 1"] and limit["cores"]["set 2"] == full
    assert bench.limit_spreads({"bandwidth": limit})[0].endswith(
        "\n  FLAG: set 1 ran starved (the fastest round under 75% of the usable cores' worth): "
        "the bandwidth may be low"
    )
    sets = iter([([100e9], full), ([95e9], full), ([96e9], full)])
    assert bench.measured_limit(lambda: next(sets))["starved"] == []
    sets = iter([[100e9], [95e9], [96e9]])  # no cores' worth (a GPU's): no rule
    assert "starved" not in bench.measured_limit(lambda: next(sets))


def test_no_bare_ridge_from_a_busy_limit_or_one_whose_sets_all_ran_starved():
    """3b gives no side of the ridge from a busy deciding set or a limit whose sets all ran
    starved; bench gives no ridge then (null, with the reason in words, printed in its place). A
    starved set beside one that got the cores leaves the ridge standing."""
    from course_tools import bench
    from course_utils import timing, verdict

    usable = timing.usable_cpus()
    full, starved = [usable] * 2, [0.5 * verdict.STARVED * usable] * 2
    sets = iter([([100e9], starved), ([95e9], starved), ([96e9], starved)])
    peak = bench.measured_limit(lambda: next(sets))
    sets = iter([([10e9], starved), ([9e9], full), ([9.5e9], full)])
    bandwidth = bench.measured_limit(lambda: next(sets))
    assert bench.ridge_withheld({"peak": peak, "bandwidth": bandwidth}) == (
        "no ridge: every peak set ran starved, so it may be low"
    )
    assert bench.ridge_withheld({"peak": bandwidth, "bandwidth": bandwidth}) == ""
    busy = bandwidth | {"busy": True}
    assert bench.ridge_withheld({"peak": bandwidth, "bandwidth": busy}) == (
        "no ridge: the bandwidth was measured on a busy machine, so it may be low"
    )


def test_a_limit_measured_on_a_busy_machine_is_flagged():
    """As in notebook 3b, each set of a limit records the share of the cores other programs used
    during its rounds (`timing.Load`, from `rates_in_rounds`); above `timing.BUSY` during one of
    the two sets that decide the limit (100) and its low end (80), the report flags the limit as
    low; busy during the slowest set (70, within 1.5x), not."""
    from course_tools import bench
    from course_utils import timing

    busy = timing.BUSY

    def measure(set_shares: list[float]) -> dict:
        # each set as `rates_in_rounds` gives it: rates, no cores' worth (a GPU's), others' share
        sets = iter(zip([[100e9], [70e9], [80e9]], [[], [], []], set_shares))
        return bench.measured_limit(lambda: next(sets), busy=busy)

    limit = measure([0.05, 0.1, 0.6])
    assert limit["others_share"] == {"set 1": 0.05, "set 2": 0.1, "set 3": 0.6}
    assert limit["busy"] is True and busy < 0.6
    assert bench.limit_spreads({"peak": limit}) == [
        "  peak: at least 100.0 GFLOP/s (fastest round); the other sets' fastest 80.0 (80%); "
        "other programs used up to 60% of the cores meanwhile\n"
        "  FLAG: the machine was busy: the peak may be measured low, run again"
    ]
    quiet = measure([0.05, 0.6, 0.1])  # the slowest set was the busy one
    assert quiet["busy"] is False and "FLAG" not in bench.limit_spreads({"peak": quiet})[0]
    assert "up to 10% of the cores" in bench.limit_spreads({"peak": quiet})[0]


#: A 2-replica all-reduce fit as `course bench` records it (alpha 100 us, 4 and 16 KiB measured).
ALL_REDUCE_FIT = {
    "replicas": 2,
    "alpha_seconds": 100e-6,
    "beta_seconds_per_byte": 50e-12,
    "intercept_large_seconds": -30e-6,
    "beta_large_seconds_per_byte": 80e-12,
    "worst_error": 0.1,
    "tolerance": 0.25,
    "within_tolerance": True,
    "overhead_seconds": 9e-6,
    "sizes_bytes": [4096, 16384],
}


def test_an_all_reduce_line_measured_on_a_busy_machine_is_flagged():
    """As notebook 3c, `course bench` measures the load beside the all-reduce's rounds: busy
    during one set, the report flags the line and draws no alpha-or-bytes call; quiet, no flag."""
    from course_tools import bench

    fit = ALL_REDUCE_FIT | {"seconds": [120e-6, 130e-6]}
    busy = bench.all_reduce_line(fit | {"others_share": [0.1, 0.7], "busy": True})
    assert "FLAG: the machine was busy: other programs used up to 70% of the cores" in busy
    quiet = bench.all_reduce_line(fit | {"others_share": [0.1], "busy": False})
    assert "FLAG" not in quiet and "alpha 100 us" in quiet
    assert "80.0 from 4 to 16 MiB (intercept -30 us; worst error 10.0%)" in quiet


def test_an_all_reduce_alpha_above_a_size_s_whole_time_is_flagged_as_3c_withholds_its_call():
    """Alpha 100 us against 4 KiB measured at 90 us, beyond the line's worst miss (10%): the run
    contradicts the intercept, so the report flags it with 3c's reason (`verdict.alpha_above`);
    at 95 us, within that miss, and at 120 us, no flag."""
    from course_tools import bench

    fit = ALL_REDUCE_FIT | {"others_share": [0.1], "busy": False}
    line = bench.all_reduce_line(fit | {"seconds": [90e-6, 130e-6]})
    assert (
        "FLAG: alpha, a fitted intercept (100.0 us), exceeds the whole measured time of 4 KiB "
        "(90.0 us) by more than the line's worst miss (10.0%); as in notebook 3c, no call: run "
        "again"
    ) in line
    assert "FLAG" not in bench.all_reduce_line(fit | {"seconds": [95e-6, 130e-6]})
    assert "FLAG" not in bench.all_reduce_line(fit | {"seconds": [120e-6, 130e-6]})


def test_the_ridge_range_searches_each_limit_up_to_its_headroom_as_3b(monkeypatch):
    """`course bench`'s ridge range is 3b's: each limit is a lower bound searched up to its
    `verdict.headroom` (the best rate per core times the usable CPUs), so the range runs from the
    peak over the bandwidth's top to the peak's top over the bandwidth, not from the slower sets'
    fastest rounds (which only flag: they are below a value the run reached)."""
    from course_tools import bench
    from course_utils import timing, verdict

    monkeypatch.setattr(timing, "usable_cpus", lambda: 2.0)
    peak_sets = iter([([100e9, 90e9], [1.0, 1.0]), ([80e9], [0.5]), ([95e9], [1.0])])
    peak = bench.measured_limit(lambda: next(peak_sets))
    assert peak["low"] == 95e9 and peak["headroom"] == pytest.approx(2 * 160e9 / 100e9)
    band_sets = iter([([20e9], [2.0]), ([19e9], [2.0]), ([18e9], [2.0])])
    bandwidth = bench.measured_limit(lambda: next(band_sets))
    assert bandwidth["headroom"] == pytest.approx(1 / verdict.STARVED)  # full cores: the floor
    low, high = bench.ridge_range(peak, bandwidth)
    assert high == pytest.approx(16.0) and low == pytest.approx(5 * verdict.STARVED)
    assert low < 5.0 < high  # the ridge at the fastest rounds lies inside; 95/20 is no end


def test_a_limit_set_too_short_to_measure_its_load_is_not_called_busy():
    """As 3b: rounds lasting under `timing.SHORT` in all read one 0.01 s CPU-counter tick as a
    share of the cores (20% of 2 cores over 25 ms), so `course bench` reads their share as
    unmeasured (0), not busy; a set long enough to measure keeps its share and its flag."""
    from course_tools import bench
    from course_utils import timing

    short = bench.limit_set_reading(([1e9, 1e9], [2.0, 2.0], 0.6), 1e6, gpu=False)  # 2 ms
    long = bench.limit_set_reading(([1e9, 1e9], [2.0, 2.0], 0.6), 1e9, gpu=False)  # 2 s
    assert short[2] == 0.0 and long[2] == 0.6 > timing.BUSY
    flagged = bench.measured_limit(lambda: long, 2, busy=timing.BUSY)
    assert flagged["busy"] is True
    assert bench.measured_limit(lambda: short, 2, busy=timing.BUSY)["busy"] is False
    assert bench.limit_set_reading(([1e9], [1.0], 0.0), 1e9, gpu=True)[1] == []  # GPU: no worth


def test_a_comparison_measured_on_a_busy_machine_prints_its_ratio_and_no_verdict():
    """Notebook 3 gives no speed verdict when other programs used more than timing.BUSY of the
    cores during its rounds; `course bench`, which runs its code, holds to the same rule for the
    replica count whose rounds were busy, and leaves that target unjudged."""
    from course_tools import bench
    from course_utils import timing

    sizes = bench.QUICK
    m1, m2 = "MirroredStrategy(1)", "MirroredStrategy(2)"

    def runs(m, speeds):
        names = [
            "no strategy + fit",
            f"{m} + fit",
            f"{m} + custom loop, 1 step/call",
            f"{m} + custom loop, {sizes.steps_per_call} steps/call",
        ]
        return [
            timing.RunResult(n, 1.0, 1, rounds=[s, s * 1.01, s * 0.99])
            for n, s in zip(names, speeds, strict=True)
        ]

    results = {1: runs(m1, [100, 80, 95, 99]), 2: runs(m2, [100, 80, 85, 120])}
    quiet = {1: [0.05, 0.1, 0.08], 2: [0.1, 0.1, 0.1]}
    busy = {1: [0.05, 0.1, 0.08], 2: [0.1, 0.7, 0.1]}
    verdicts = bench.comparisons(results, sizes, quiet)
    assert not any(v["busy"] for v in verdicts.values())
    verdicts = bench.comparisons(results, sizes, busy)
    assert verdicts["mirrored1_vs_no_strategy"]["busy"] is None
    assert all(verdicts[k]["busy"] == 0.7 for k in verdicts if k != "mirrored1_vs_no_strategy")
    line = bench.verdict_line(verdicts["custom_loop_vs_fit"])
    assert line.endswith("no verdict: other programs used up to 70% of the cores during the rounds")
    assert "faster" not in line and "slower" not in line
    met = {row["measure"]: row["met"] for row in bench.target_rows(verdicts)}
    assert met == {"custom_loop_vs_fit": None, "mirrored1_vs_no_strategy": False}
