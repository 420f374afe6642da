import json
import time

import matplotlib

matplotlib.use("Agg")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from helpers import ROOT  # noqa: E402

from course_utils import plots, timing  # noqa: E402


def run(name: str, rounds: list[float]) -> timing.RunResult:
    """A RunResult measured in `rounds` (examples/s per round), as `measure` makes them."""
    return timing.RunResult(name, seconds=1.0, examples=1, rounds=rounds)


def test_timer_measures_wall_time():
    with timing.Timer() as t:
        time.sleep(0.2)
    assert 0.19 < t.seconds < 2.0


def test_the_timer_records_this_process_s_cpu_seconds_beside_the_wall_s():
    """3b labels a round starved from its cores' worth (CPU seconds over wall seconds): a
    block that waits gets almost none; one that computes gets its CPU seconds counted, at most
    the wall's times the CPUs it may use."""
    with timing.Timer() as waiting:
        time.sleep(0.2)
    assert waiting.seconds >= 0.2 and waiting.cores < 0.1
    with timing.Timer() as computing:
        start = time.process_time()
        while time.process_time() - start < 0.05:  # 0.05 s of CPU, however busy the machine
            pass
    assert computing.cpu_seconds >= 0.05
    assert 0 < computing.cores <= timing.usable_cpus() * 1.05
    assert computing.cores == computing.cpu_seconds / computing.seconds


def test_the_exercises_epoch_clock_records_epochs_and_steps():
    # EpochClock is the exercise's own cell (given to students): run it as the notebook does.
    solution = json.loads((ROOT / "solutions" / "05_svhn_solution.ipynb").read_text())
    (source,) = [
        "".join(cell["source"])
        for cell in solution["cells"]
        if "".join(cell["source"]).startswith("class EpochClock")
    ]
    # 90 examples in batches of 25: 4 steps an epoch, the last one short (15)
    namespace = {"keras": keras, "time": time, "timing": timing, "NUM_TRAIN": 90}
    exec(source, namespace)
    x, y = np.random.rand(90, 4).astype("float32"), np.random.randint(0, 2, 90)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    clock = namespace["EpochClock"]()
    model.fit(x, y, batch_size=25, epochs=3, verbose=0, callbacks=[clock])
    assert len(clock.epoch_seconds) == 3 and clock.epoch_steps == [4, 4, 4]
    # each epoch's start-up (before its first step) is part of the epoch, and the steps follow it
    assert all(0 < s < e for s, e in zip(clock.start_seconds, clock.epoch_seconds))
    result = clock.run("fit", 25)
    # the tracing epoch left out; the examples counted, not 4 steps x 25
    assert result.epochs == 2 and result.examples == 180
    per_epoch = [90 / s for s in clock.epoch_seconds[1:]]  # each epoch is one round
    assert result.rounds == pytest.approx(per_epoch) and result.batch_size == 25
    assert result.examples_per_sec == pytest.approx(np.median(per_epoch))


def test_timed_epochs_become_rounds_without_the_first():
    three = timing.RunResult.from_epochs("loop", [9.0, 2.0, 4.0], [10, 10, 10], batch_size=8)
    assert (three.epochs, three.seconds, three.examples) == (2, 6.0, 160)  # tracing epoch left out
    assert three.rounds == [40.0, 20.0] and three.step_ms == pytest.approx(1000 * 8 / 30)
    one = timing.RunResult.from_epochs("loop", [2.0], [10], batch_size=8)
    assert (one.epochs, one.rounds) == (1, [40.0])  # a single epoch is all there is
    # 75 examples in 10 steps of 8 (the last batch short): the examples count, not steps x batch
    short = timing.RunResult.from_epochs("loop", [9.0, 2.5], [10, 10], batch_size=8, examples=75)
    assert (short.examples, short.rounds) == (75, [30.0])
    assert short.step_ms == pytest.approx(1000 * 7.5 / 30)  # 7.5 examples a step on average


def test_run_result_table_and_chart():
    results = [timing.RunResult("one device", 10.0, 1000), timing.RunResult("mirrored", 20.0, 1000)]
    assert results[1].examples_per_sec == 50.0
    table = timing.results_table(results)
    assert table.splitlines()[0].split() == ["run", "seconds", "examples/s", "vs", "one", "device"]
    assert table.splitlines()[3].split() == ["mirrored", "20.00", "50", "0.50x"]
    ax = plots.plot_comparison(results)
    assert [bar.get_width() for bar in ax.patches] == [100.0, 50.0]


def test_table_headers_say_timed_seconds_and_median_round():
    """With rounds, seconds (the timed rounds' sum) and examples/s (the median round) need not
    divide: the header says which is which, so a reader does not divide one by the other."""
    timed = run("loop", [100.0, 400.0, 120.0])  # median 120/s; 3 examples/s-rounds
    header = timing.results_table([timed]).splitlines()[0]
    assert "seconds, timed rounds" in header and "examples/s, median round" in header
    assert "120" in timing.results_table([timed]).splitlines()[2]
    mixed = timing.results_table([timed, timing.RunResult("once", 2.0, 100)]).splitlines()[0]
    assert "examples/s, median round or total" in mixed


def test_the_load_of_other_programs_is_measured():
    """`timing.Load` counts another program's CPU time as the others' share of the cores: a
    process spinning for a second inside the block holds one core for most of it; this
    process's own work inside the block is not counted as others'."""
    import subprocess
    import sys

    import psutil

    spin = "import time\nend = time.time() + 1.0\nwhile time.time() < end: pass\n"
    with timing.Load() as load:
        subprocess.run([sys.executable, "-c", spin], check=True)
    assert 0.5 / psutil.cpu_count() <= load.others <= 1.0, load.others


def test_the_load_is_a_share_of_the_cpus_this_process_may_use(tmp_path, monkeypatch):
    """A cgroup v2 quota of 1.5 CPUs (cpu.max "150000 100000") caps the CPUs `timing.Load`
    divides by; "max" (no quota) or an unreadable file leaves this process's affinity."""
    import os

    allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cpu_max = tmp_path / "cpu.max"
    monkeypatch.setattr(timing, "CPU_MAX", cpu_max)
    monkeypatch.setattr(timing, "CFS_QUOTA", tmp_path / "v1" / "cpu.cfs_quota_us")  # none
    cpu_max.write_text("150000 100000\n")
    assert timing.usable_cpus() == min(allowed, 1.5)
    cpu_max.write_text("max 100000\n")
    assert timing.usable_cpus() == allowed
    cpu_max.unlink()
    assert timing.usable_cpus() == allowed
    cpu_max.write_text("50000 100000\n")  # half a CPU: another program's second is all of it
    spin = "import time\nend = time.time() + 1.0\nwhile time.time() < end: pass\n"
    import subprocess
    import sys

    with timing.Load() as load:
        subprocess.run([sys.executable, "-c", spin], check=True)
    assert load.others == 1.0, load.others


def test_a_cgroup_v1_quota_caps_the_usable_cpus(tmp_path, monkeypatch):
    """On a cgroup v1 host (many Docker hosts: `docker run --cpus 1.5`), the quota is
    cpu.cfs_quota_us over cpu.cfs_period_us under /sys/fs/cgroup/cpu: 150000 / 100000 caps the
    usable CPUs at 1.5; "-1" (no quota), a missing file or a missing period leaves the affinity;
    a v2 `cpu.max` is read first where both exist."""
    import os

    allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    v1 = tmp_path / "cpu"
    v1.mkdir()
    monkeypatch.setattr(timing, "CPU_MAX", tmp_path / "cpu.max")  # no v2 file
    monkeypatch.setattr(timing, "CFS_QUOTA", v1 / "cpu.cfs_quota_us")
    (v1 / "cpu.cfs_quota_us").write_text("150000\n")
    assert timing.usable_cpus() == allowed  # no period beside it: unreadable
    (v1 / "cpu.cfs_period_us").write_text("100000\n")
    assert timing.usable_cpus() == min(allowed, 1.5)
    (v1 / "cpu.cfs_quota_us").write_text("50000\n")
    assert timing.usable_cpus() == 0.5
    (tmp_path / "cpu.max").write_text("100000 100000\n")  # v2's 1 CPU wins
    assert timing.usable_cpus() == min(allowed, 1.0)
    (tmp_path / "cpu.max").unlink()
    (v1 / "cpu.cfs_quota_us").write_text("-1\n")
    assert timing.usable_cpus() == allowed


def test_the_load_counts_only_the_cpus_this_process_may_run_on(monkeypatch, tmp_path):
    """Pinned to CPU 1 (`taskset`, a Slurm cpuset), another program's second on CPU 0 is not
    load on this process's CPUs: `others` counts the busy time of the CPUs in its affinity only,
    the same CPUs `usable_cpus` divides by; a second on CPU 1 fills it."""
    import os
    from types import SimpleNamespace

    import psutil

    fields = psutil.cpu_times()._fields
    zero = psutil.cpu_times()._make([0.0] * len(fields))
    before = [zero, zero]
    after = {
        "cpu 0 busy": [zero._replace(user=1.0), zero],
        "cpu 1 busy": [zero, zero._replace(user=1.0)],
    }
    snapshots = []

    def cpu_times(*, percpu=False):  # per CPU, or summed over the machine as psutil does
        snapshot = snapshots.pop(0)
        return snapshot if percpu else zero._make(map(sum, zip(*snapshot)))

    monkeypatch.setattr(psutil, "cpu_times", cpu_times)
    own = SimpleNamespace(cpu_times=lambda: SimpleNamespace(user=0.0, system=0.0))
    monkeypatch.setattr(psutil, "Process", lambda: own)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {1}, raising=False)
    monkeypatch.setattr(timing, "CPU_MAX", tmp_path / "none")  # no quota
    monkeypatch.setattr(timing, "CFS_QUOTA", tmp_path / "none either")
    for case, expected in [("cpu 0 busy", 0.0), ("cpu 1 busy", 1.0)]:
        snapshots[:] = [before, after[case]]
        with timing.Load() as load:
            time.sleep(0.05)  # the block's wall time: 1 CPU-second is more than it on one CPU
        assert load.others == expected, (case, load.others)


def test_comparison_chart_labels_sit_clear_of_bars_and_rounds():
    """Each value label starts right of its bar and of the run's fastest round, inside the axes."""
    results = [run("one device", [7400.0, 7691.0, 8200.0]), run("mirrored", [3900.0, 4100.0])]
    ax = plots.plot_comparison(results, title="Speed (replicas: 2)")
    ax.figure.canvas.draw()
    renderer = ax.figure.canvas.get_renderer()
    labels = [t for t in ax.texts]
    assert [t.get_text() for t in labels] == ["7,691", "4,000"]
    for label, result in zip(labels, results):
        box = label.get_window_extent(renderer)
        rightmost = ax.transData.transform((max(result.rounds), 0))[0]
        assert box.x0 > rightmost, (label.get_text(), box.x0, rightmost)
        assert box.x1 < ax.get_window_extent(renderer).x1, "the label fits inside the axes"
    assert ax.get_title() == "Speed (replicas: 2)"


def test_plot_history_draws_train_and_validation():
    fig = plots.plot_history({"loss": [1.0, 0.5], "val_loss": [1.1, 0.7], "accuracy": [0.5, 0.8]})
    assert len(fig.axes) == 2
    assert [len(ax.lines) for ax in fig.axes] == [2, 1]
    with pytest.raises(
        ValueError, match=r"None of \['loss', 'accuracy'\] is in the history; it has \['auc'\]"
    ):
        plots.plot_history({"auc": [0.5]})


def test_compare_applies_one_noise_rule_both_ways():
    faster = timing.compare(run("a", [10, 11, 12]), run("b", [5, 6, 7]))
    assert (faster.word, round(faster.speed_ratio, 3)) == ("faster", 1.833)
    assert faster.sentence.startswith("a is 83% faster than b: median 11.00 vs 6.00 examples/s")
    slower = timing.compare(run("b", [5, 6, 7]), run("a", [10, 11, 12]))
    assert slower.word == "slower" and "b is 45% slower than a" in slower.sentence
    overlap = timing.compare(run("a", [10, 11, 12]), run("b", [11.5, 13, 14]))
    assert overlap.word == "within noise" and "%" not in overlap.sentence


def test_compare_refuses_a_single_round():
    with pytest.raises(ValueError, match="'a' has rounds \\[1.0\\]: compare needs at least 2"):
        timing.compare(run("a", [1.0]), run("b", [1.0, 2.0]))


def test_record_appends_verdicts_with_their_samples(tmp_path):
    path = tmp_path / "out" / "conclusions.json"
    timing.record(timing.compare(run("a", [10, 11]), run("b", [5, 6])), path)
    timing.record(timing.compare(run("c", [1, 2]), run("d", [1.5, 3])), path)
    saved = json.loads(path.read_text())
    assert [(r["a"], r["word"], r["b_samples"]) for r in saved] == [
        ("a", "faster", [5.0, 6.0]),
        ("c", "within noise", [1.5, 3.0]),
    ]


@pytest.mark.parametrize(
    "rounds, one_in", [((2, 2), 3), ((3, 3), 10), ((4, 4), 35), ((5, 5), 126), ((7, 7), 1716)]
)
def test_false_alarm_rate_at_the_notebooks_round_counts(rounds, one_in):
    # 2: SVHN's quick and cpu profiles (3 epochs, the first left out); 3: quick; 4: SVHN full;
    # 5: full; 7: notebook 3c's all-reduce.
    assert timing.false_alarm_rate(*rounds) == pytest.approx(1 / one_in)


def test_false_alarm_rate_matches_the_rule_on_identical_noisy_runs():
    """Identical runs, every round an independent lognormal draw: compare's own word calls them
    different as often as false_alarm_rate says (20,000 pairs each; 4 standard errors)."""
    rng = np.random.default_rng(7)
    trials = 20_000
    for a_rounds, b_rounds in [(2, 2), (3, 3), (2, 3)]:
        draws = rng.lognormal(np.log(1000), 0.3, size=(trials, a_rounds + b_rounds))
        alarms = sum(
            timing.compare(run("a", list(d[:a_rounds])), run("b", list(d[a_rounds:]))).word
            != "within noise"
            for d in draws
        )
        rate = timing.false_alarm_rate(a_rounds, b_rounds)
        assert abs(alarms / trials - rate) < 4 * np.sqrt(rate * (1 - rate) / trials), (
            a_rounds,
            b_rounds,
            alarms / trials,
            rate,
        )
    # Interleaved rounds whose load hits both runs alike (a shared factor per round) alarm less.
    load = rng.lognormal(0, 0.5, size=(trials, 1, 3))
    draws = load * rng.lognormal(np.log(1000), 0.1, size=(trials, 2, 3))
    alarms = sum(
        timing.compare(run("a", list(a)), run("b", list(b))).word != "within noise"
        for a, b in draws
    )
    assert alarms / trials < timing.false_alarm_rate(3, 3) / 2


def test_a_verdict_on_few_rounds_says_how_often_equal_runs_get_it():
    three = timing.compare(run("a", [10, 11, 12]), run("b", [5, 6, 7]))
    assert three.false_alarm == pytest.approx(0.1)
    assert three.sentence.endswith(
        "every round agrees (10.00-12.00 vs 5.00-7.00), but with 3 rounds each, runs of equal "
        "speed fail to overlap 1 time in 10."
    )
    uneven = timing.compare(run("a", [10, 11]), run("b", [5, 6, 7]))
    assert uneven.sentence.endswith(
        "with 2 and 3 rounds, runs of equal speed fail to overlap 1 time in 5."
    )
    # Both ends of a range in one format, that of the larger end.
    mixed = timing.compare(run("a", [941, 1112]), run("b", [99.23, 446]))
    assert "every round agrees (941-1,112 vs 99-446)" in mixed.sentence
    five = timing.compare(run("a", [10, 11, 12, 13, 14]), run("b", [5, 6, 7, 8, 9]))
    assert five.sentence.endswith("(10.00-14.00 vs 5.00-9.00).") and "time in" not in five.sentence
    noise = timing.compare(run("a", [10, 11, 12]), run("b", [11.5, 13, 14]))
    assert "time in" not in noise.sentence  # no decision, no false alarm
    with pytest.raises(ValueError, match="round counts must be positive"):
        timing.false_alarm_rate(0, 3)


def _notebook_function(notebook: str, name: str, namespace: dict):
    """The function `name` as the notebook defines it, run in `namespace` (its globals)."""
    import ast

    cells = json.loads((ROOT / "notebooks" / notebook).read_text())["cells"]
    for source in ("".join(c["source"]) for c in cells if c["cell_type"] == "code"):
        try:
            body = ast.parse(source).body
        except SyntaxError:  # a cell with IPython magics: no function of ours
            continue
        for node in body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                exec(ast.get_source_segment(source, node), namespace)
                return namespace[name]
    raise AssertionError(f"{notebook} defines no {name}")


@pytest.mark.parametrize("busy", ["warm-up", "rounds"])
def test_the_load_that_decides_busy_is_the_timed_rounds_not_the_warm_up(monkeypatch, busy):
    """3b's `rates_in_rounds` and `measure` and 3c's `seconds_per_run` report the share of the
    cores others used during their timed rounds only: other programs holding every core through
    the untimed warm-up (tracing, a third of a second here, most of a real set's window) while
    the rounds ran alone is not busy (else a quiet set's verdict is withheld), and the reverse,
    a quiet warm-up before rounds that ran beside a program holding every core, is busy (else a
    slowed set's verdict is drawn, the warm-up diluting the load below `timing.BUSY`)."""
    from types import SimpleNamespace

    others_seconds = [0.0]  # other programs' busy CPU seconds, as `timing.Load` reads them
    monkeypatch.setattr(timing, "_cpu_seconds", lambda: (others_seconds[0], 0.0))

    def work(*_args):  # a warm-up call (the first), then the rounds'
        seconds, warm_up = (0.3, True) if not calls else (0.02, False)
        calls.append(1)
        start = time.perf_counter()
        time.sleep(seconds)
        if warm_up == (busy == "warm-up"):  # others hold every usable core meanwhile
            others_seconds[0] += (time.perf_counter() - start) * timing.usable_cpus()
        return 0.0

    namespace = {"timing": timing, "tf": SimpleNamespace(constant=lambda value: value)}
    rates_in_rounds = _notebook_function("03b_where_time_goes.ipynb", "rates_in_rounds", namespace)
    measure = _notebook_function("03b_where_time_goes.ipynb", "measure", namespace)
    seconds_per_run = _notebook_function(
        "03c_allreduce_and_profile.ipynb", "seconds_per_run", namespace
    )
    shares = {}
    calls = []
    *_, shares["rates_in_rounds"] = rates_in_rounds(work, 1.0, 1, 3)
    calls.clear()
    _, shares["measure"] = measure({"run": work}, 1, 3, {"run": 1})
    calls.clear()
    _, shares["seconds_per_run"] = seconds_per_run({"loop": work}, {"loop": 1}, 3)
    for function, share in shares.items():
        if busy == "warm-up":
            assert share <= timing.BUSY / 4, (function, share)
        else:
            assert share > 0.8, (function, share)


def test_a_set_too_short_for_the_cpu_counters_reads_unmeasured_not_busy():
    """A review found 3b's quick addition set (24.4 ms of rounds on 2 CPUs) reading one 0.01 s
    tick of others' time as 20%, over `timing.BUSY`, and withholding a quiet machine's verdict.
    Under `timing.SHORT` the share is unmeasured: the busy rule reads 0, the words say so; a
    longer set's share is read as measured, busy when over the threshold. 3b and 3c read every
    set through `load_reading`, one rule."""
    assert timing.load_reading(0.2015, 0.0244) == (0.0, "unmeasured (coarse, 0.024 s)")
    assert timing.load_reading(0.2015, 0.0996)[1] == "unmeasured (coarse, 0.099 s)"  # not 0.10
    share, said = timing.load_reading(0.2015, timing.SHORT)
    assert share > timing.BUSY and said == "20%"
    for notebook in ("03b_where_time_goes.ipynb", "03c_allreduce_and_profile.ipynb"):
        text = (ROOT / "notebooks" / notebook).read_text()
        assert "timing.load_reading(" in text, notebook


def test_every_round_of_the_all_reduce_starts_with_an_untimed_call_of_its_first_loop():
    """A review measured a small loop timed right after 3c's 16 MiB one running 13-16 us per run
    slower (7 us for the loop alone, 20% of it, subtracted from every size): the loop timed first
    in each round paid for the previous round's last. Each round now starts with an untimed call
    of its first loop, which pays that instead; the timed calls keep their order and count."""
    from types import SimpleNamespace

    order = []

    def loop(name):
        def run(count):
            order.append(name)
            return 0.0

        return run

    namespace = {"timing": timing, "tf": SimpleNamespace(constant=lambda value: value)}
    seconds_per_run = _notebook_function(
        "03c_allreduce_and_profile.ipynb", "seconds_per_run", namespace
    )
    calls = {name: loop(name) for name in ("loop alone", "4 KiB", "16 MiB")}
    samples, _ = seconds_per_run(calls, dict.fromkeys(calls, 3), 2)
    warm_up, rounds = order[:3], order[3:]
    assert warm_up == list(calls)
    assert rounds == ["loop alone", *calls] * 2  # the untimed call, then every loop timed
    assert all(len(s) == 2 for s in samples.values())


def test_cache_sizes_count_every_l3_domain_once(tmp_path):
    # Four CPUs in two L3 domains (0-1 and 2-3), each CPU with its own L1: the last level is
    # both domains' L3 together, not cpu0's slice; a shared cache is not counted per CPU.
    def cache(cpu, index, shared, **fields):
        folder = tmp_path / f"cpu{cpu}" / "cache" / f"index{index}"
        folder.mkdir(parents=True)
        for name, text in (fields | {"shared_cpu_list": shared}).items():
            (folder / name).write_text(f"{text}\n")

    for cpu in range(4):
        cache(cpu, 0, cpu, level=1, type="Data", size="48K")
        cache(cpu, 3, "0-1" if cpu < 2 else "2-3", level=3, type="Unified", size="32768K")
    (tmp_path / "cpufreq").mkdir()  # not a CPU
    sizes = timing.cache_sizes(tmp_path)
    assert sizes == {"L1 data": 4 * 48 << 10, "L3 unified": 2 * 32 << 20}
    assert timing.cache_sizes(tmp_path / "absent") == {}
