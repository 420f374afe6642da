"""`course bench`: single device vs distributed training, each replica count in a fresh process.

It measures what notebook 3's section 2 measures, outside any notebook, with the notebook's own
model, input pipeline and trainers: the notebook's code cells tagged "bench" are read from the
notebook and run (`notebook_code`), so there is no copy to keep in step. For each replica count
a new Python process builds ONE `tf.distribute.MirroredStrategy` over that many devices
(TensorFlow numbers the collective groups of every MirroredStrategy from the same start, so two
sizes in one process would share groups) and times, with the notebook's `measure` (warm-up,
interleaved rounds, medians):

1. no strategy + fit                                   the single-device baseline
2. MirroredStrategy(n) + fit                           n replicas (n = 1: the strategy's own cost)
3. MirroredStrategy(n) + custom loop, 1 step/call      the classic loop
4. MirroredStrategy(n) + custom loop, k steps/call     for an overhead-bound step (notebook 3)

Every configuration trains the same CNN on the same data with the same GLOBAL batch (per-replica
batch x n) for the same number of steps. Each comparison is judged by `timing.compare`'s noise rule.

Example (a minute or more: one process per replica count):

    $ course bench --quick --output bench.json

    from course_tools import bench
    report = bench.run_benchmark(bench.QUICK, devices=2)
    print(bench.report_text(report))
"""

from __future__ import annotations

import argparse
import atexit
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from course_utils import tables, timing, verdict
from course_utils.quiet import import_tensorflow

#: Per-replica batch of the course's notebooks (global batch = this x replicas).
PER_REPLICA_BATCH = 64
#: Goals for the custom loop and for one replica (speed ratios), set by hand: what the course
#: hopes its settings keep, not a promise measured on every machine.
TARGETS = {"custom_loop_vs_fit": 0.95, "mirrored1_vs_no_strategy": 0.90}


@dataclass(frozen=True)
class Sizes:
    """How much to measure: timed steps per round, rounds, steps per call, training examples."""

    steps: int
    rounds: int
    steps_per_call: int
    examples: int


FULL = Sizes(steps=100, rounds=5, steps_per_call=20, examples=16384)
QUICK = Sizes(steps=10, rounds=3, steps_per_call=5, examples=2048)


# ----------------------------------------------------------------------------------------------
# The code of notebook 3: its cells tagged "bench", read from the notebook itself
# ----------------------------------------------------------------------------------------------

#: The notebook whose tagged cells `course bench` runs, and the tag.
NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "03_single_vs_distributed.ipynb"
TAG = "bench"
#: The notebooks whose tagged cells measure the machine: its limits and the step's count (3b),
#: the all-reduce's timing and fit (3c).
LIMITS_NOTEBOOK = NOTEBOOK.with_name("03b_where_time_goes.ipynb")
LIMITS_CODE = (
    "rates_in_rounds",
    "matrix_products",
    "additions",
    "addition_megabytes",
    "matrix_size",
    "make_model",
    "step_count",
)
ALL_REDUCE_NOTEBOOK = NOTEBOOK.with_name("03c_allreduce_and_profile.ipynb")
ALL_REDUCE_CODE = (
    "all_reduce_loop",
    "seconds_per_run",
    "fit_all_reduce",
    "TOLERANCE",
    "ALL_REDUCE_ROUNDS",
)
#: What the tagged cells must define.
NOTEBOOK_CODE = (
    "make_model",
    "training_pipeline",
    "StepClock",
    "fit_trainer",
    "custom_loop_trainer",
    "measure",
)


def notebook_code(
    path: Path = NOTEBOOK, tag: str = TAG, names: tuple[str, ...] = NOTEBOOK_CODE
) -> dict:
    """Import the code cells of `path` tagged `tag` (cell metadata "tags") as a module, with the
    notebook's imports (time, tf, keras, tables, timing), and return its namespace, which must
    define `names`: `course bench` times exactly what the notebooks teach, with no copy to keep in
    step.

    >>> code = notebook_code()
    >>> model = code["make_model"]()
    """
    if not path.exists():
        raise FileNotFoundError(
            f"course bench runs the notebooks' cells, but {path} is missing: run it from a clone "
            "of the course repository (pip install -e .)."
        )
    notebook = json.loads(path.read_text())
    sources = [
        "".join(cell["source"])
        for cell in notebook["cells"]
        if cell["cell_type"] == "code" and tag in cell.get("metadata", {}).get("tags", [])
    ]
    # Written to a module file and imported, as d2l does: AutoGraph (tf.function) reads the
    # source of the functions it converts, which code run by exec() does not have.
    header = (
        "import time\n\nimport keras\nimport tensorflow as tf\n\n"
        "from course_utils import tables, timing\n"
    )
    folder = tempfile.mkdtemp(prefix="course_bench_")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)  # needed until the process ends
    module_name = f"notebook_{path.stem}_{tag}"
    module_path = Path(folder) / f"{module_name}.py"
    module_path.write_text("\n\n".join([header, *sources]) + "\n")
    spec = importlib.util.spec_from_file_location(module_name, module_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    namespace = vars(module)
    missing = [name for name in names if name not in namespace]
    if missing:
        raise RuntimeError(
            f"{path.name}'s cells tagged {tag!r} no longer define {', '.join(missing)}: tag the "
            f'cells that define them (cell metadata "tags": ["{tag}"]).'
        )
    return namespace


# ----------------------------------------------------------------------------------------------
# One process: one strategy size
# ----------------------------------------------------------------------------------------------


def _strategy(replicas: int):
    """A MirroredStrategy over the first `replicas` devices."""
    tf = import_tensorflow()
    devices = [d.name for d in tf.config.list_logical_devices("GPU")] or [
        d.name for d in tf.config.list_logical_devices("CPU")
    ]
    if replicas > len(devices):
        raise ValueError(
            f"{replicas} replicas asked for, but this process has {len(devices)} logical "
            f"device(s). Set COURSE_DEVICES={replicas} (or pass --devices {replicas})."
        )
    return tf.distribute.MirroredStrategy(devices[:replicas])


def _trainers(code: dict, mirrored, sizes: Sizes) -> dict:
    """The four configurations of notebook 3's section 2, with the notebook's code."""
    from course_utils import data

    replicas = mirrored.num_replicas_in_sync
    batch = PER_REPLICA_BATCH * replicas
    images = data.load("fashion_mnist", "train", limit=sizes.examples)
    pipeline = code["training_pipeline"](images, batch)
    fit, loop = code["fit_trainer"], code["custom_loop_trainer"]
    k = sizes.steps_per_call
    m = f"MirroredStrategy({replicas})"
    return {
        "no strategy + fit": fit(import_tensorflow().distribute.get_strategy(), pipeline),
        f"{m} + fit": fit(mirrored, pipeline),
        f"{m} + custom loop, 1 step/call": loop(mirrored, pipeline, batch, 1),
        f"{m} + custom loop, {k} steps/call": loop(mirrored, pipeline, batch, k),
    }


#: All-reduce sizes (bytes) for notebook 3c's fit: around the gradients, and beyond them.
ALL_REDUCE_SMALL = (4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20)
ALL_REDUCE_LARGE = (4 << 20, 8 << 20, 16 << 20)


def measured_limit(measure_set, sets: int = 3, *, busy: float = 1.0) -> dict:
    """Notebook 3b's rule for one limit: `sets` sets of rounds (`measure_set()` gives one: its
    rates, or its rates, each round's cores' worth and the share of the cores other programs used
    during the rounds, as 3b's `rates_in_rounds`); load can only slow a round, so the limit is
    the fastest round of all (a lower bound), and `low`, the fastest round of the other sets,
    shows how far load alone moved it (the slowest set's when a gap over `verdict.GAP` splits
    them: `verdict.limit_range`). With the others' share, above `busy` (`timing.BUSY`) during one
    of the two fastest sets (`verdict.searched`), the limit is flagged as measured on a busy
    machine. With the cores' worth, the sets that ran starved
    (`verdict.starved_sets`) are listed, flagged as 3b's."""
    taken, others, cores = {}, {}, {}
    for number in range(1, sets + 1):
        label = f"set {number}"
        got = measure_set()
        taken[label], cores[label], *share = got if isinstance(got, tuple) else (got, [])
        if share:
            others[label] = share[0]
    value, low = verdict.limit_range(taken)
    limit = {
        "value": value,
        "low": low,
        "fastest_of_each_set": {label: max(rounds) for label, rounds in taken.items()},
        "set_gap": verdict.set_gap(taken),  # over verdict.GAP: the sets ran unlike, flagged
    }
    if others:  # as 3b: the load during the two fastest sets (the runner-up even below a gap)
        most = max(others[label] for label in verdict.searched(taken))
        limit |= {"others_share": others, "deciding_share": most, "busy": most > busy}
    usable = timing.usable_cpus()
    if any(cores.values()):  # 3b's starved rule: a set's fastest round short of the cores
        limit |= {"cores": cores, "starved": verdict.starved_sets(taken, cores, usable)}
    # as 3b: how far above its value (a lower bound) the limit may lie (a GPU records no cores)
    limit["headroom"] = verdict.headroom(taken, cores if any(cores.values()) else {}, usable)
    return limit


def limit_set_reading(
    measured: tuple[list[float], list[float], float], work: float, *, gpu: bool
) -> tuple[list[float], list[float], float]:
    """One set of a limit's rounds from 3b's `rates_in_rounds` (`measured`: each round's rate, its
    cores' worth, the share of the cores others used; `work`: what each round did), read as 3b
    reads it: the cores' worth dropped on a GPU (the process waits for the device), and the share
    through `timing.load_reading` (rounds lasting under `timing.SHORT` in all read one CPU-counter
    tick as load, so their share is unmeasured and counts as 0).

    >>> limit_set_reading(([4e9, 5e9], [2.0, 2.0], 0.5), 2e6, gpu=False)  # 0.9 ms in all
    ([4000000000.0, 5000000000.0], [2.0, 2.0], 0.0)
    """
    got, cores, others = measured
    others, _ = timing.load_reading(others, sum(work / rate for rate in got))
    return got, [] if gpu else cores, others


def ridge_range(peak: dict, bandwidth: dict) -> list[float]:
    """The ridge (FLOP per byte) across the limits' ranges, as 3b prints it: each limit is a
    lower bound searched up to its `headroom`, so from the peak over the bandwidth's top to the
    peak's top over the bandwidth (the slower sets' fastest rounds only flag).

    >>> ridge_range({"value": 100e9, "headroom": 3.2}, {"value": 20e9, "headroom": 1.25})
    [4.0, 16.0]
    """
    ridge = peak["value"] / bandwidth["value"]
    return [ridge / bandwidth["headroom"], ridge * peak["headroom"]]


def machine_figures(mirrored, sizes: Sizes) -> dict:
    """This machine's figures with notebooks 3b and 3c's own code and guards: peak FLOP/s and
    memory bandwidth, each the fastest round of three sets (and the other sets' fastest, and the
    share of the cores other programs used during each set, flagged above `timing.BUSY` as in
    3b), the all-reduce's alpha and betas over the strategy's replicas, in 3c's rounds per set
    (`ALL_REDUCE_ROUNDS`, not `sizes.rounds`), with one or two more sets
    of rounds when a size misses its line by more than 3c's tolerance (none with one replica:
    nothing is sent), the load beside each set of those rounds, flagged busy as in 3c, and the
    model's intensity. No training run's rate is set against the peak
    here (3b's sweep does)."""
    limits = notebook_code(LIMITS_NOTEBOOK, names=LIMITS_CODE)
    reduce = notebook_code(ALL_REDUCE_NOTEBOOK, names=ALL_REDUCE_CODE)
    quick = sizes.rounds < FULL.rounds
    rates = limits["rates_in_rounds"]
    gpu = bool(import_tensorflow().config.list_logical_devices("GPU"))
    side = 4096 if gpu else limits["matrix_size"](timing.usable_cpus())  # 3b's sizes
    work, flops = limits["matrix_products"](side)
    busy = timing.BUSY  # the load rule 3b and 3c share

    def limit_set(run, amount: float, repeats: int) -> tuple[list[float], list[float], float]:
        measured = rates(run, amount, repeats, sizes.rounds)
        return limit_set_reading(measured, amount * repeats, gpu=gpu)

    peak = measured_limit(lambda: limit_set(work, flops, 3 if quick else 10), busy=busy)
    add, moved = limits["additions"](limits["addition_megabytes"](64 if quick else 256))
    bandwidth = measured_limit(lambda: limit_set(add, moved, 2 if quick else 5), busy=busy)
    byte_sizes = [*ALL_REDUCE_SMALL, *ALL_REDUCE_LARGE]
    loop = reduce["all_reduce_loop"]
    calls = {"loop alone": loop(mirrored, byte_sizes[0], reduce=False)}
    calls |= {size: loop(mirrored, size) for size in byte_sizes}
    repeats = dict.fromkeys(calls, 30 if quick else 50)  # 3c's count (it runs 20x at one replica)
    rounds = reduce["ALL_REDUCE_ROUNDS"]["quick" if quick else "full"]  # 3c's, per set
    shares = []  # as 3c: the share of the cores other programs used during each set of rounds

    def reduce_rounds() -> dict:
        taken, others = reduce["seconds_per_run"](calls, repeats, rounds)
        lasted = sum(repeats[key] * sum(rounds) for key, rounds in taken.items())
        shares.append(timing.load_reading(others, lasted)[0])  # as 3c; not the warm-up's
        return taken

    samples = reduce_rounds()
    replicas = mirrored.num_replicas_in_sync
    all_reduce = {"replicas": replicas, "sizes_bytes": byte_sizes, "others_share": shares}
    if replicas > 1:
        tolerance = reduce["TOLERANCE"]
        fit = reduce["fit_all_reduce"](samples, ALL_REDUCE_SMALL, ALL_REDUCE_LARGE)
        for _ in range(2):  # as notebook 3c: one more set of rounds while a size misses its line
            if max(abs(e) for e in fit["errors"].values()) <= tolerance:
                break
            more = reduce_rounds()
            samples = {key: samples[key] + more[key] for key in samples}
            fit = reduce["fit_all_reduce"](samples, ALL_REDUCE_SMALL, ALL_REDUCE_LARGE)
        worst = max(abs(e) for e in fit["errors"].values())
        all_reduce |= {
            "seconds": [fit["seconds"][size] for size in byte_sizes],
            "overhead_seconds": fit["overhead"],
            "alpha_seconds": fit["alpha"],
            "beta_seconds_per_byte": fit["beta_small"],
            "intercept_large_seconds": fit["alpha_large"],
            "beta_large_seconds_per_byte": fit["beta_large"],
            "errors": [fit["errors"][size] for size in byte_sizes],  # alpha_above's band
            "worst_error": worst,
            "tolerance": tolerance,
            "within_tolerance": worst <= tolerance,
            "busy": max(shares) > timing.BUSY,  # 3c withholds its alpha-or-bytes call then
        }
    model = limits["make_model"]()
    step_flops, step_bytes, _ = limits["step_count"](model, PER_REPLICA_BATCH)
    no_ridge = ridge_withheld({"peak": peak, "bandwidth": bandwidth})
    return {
        "peak_flops": peak["value"],
        "memory_bandwidth": bandwidth["value"],
        "ridge_flop_per_byte": None if no_ridge else peak["value"] / bandwidth["value"],
        "ridge_range": None if no_ridge else ridge_range(peak, bandwidth),
        "ridge_note": no_ridge,
        "quick_sizes": quick,  # fewer rounds than full's: a smoke test (`ridge_words` says so)
        "physical_gpus": len(import_tensorflow().config.list_physical_devices("GPU")),
        "limits": {"peak": peak, "bandwidth": bandwidth},
        "all_reduce": all_reduce,
        "model": {
            "per_replica_batch": PER_REPLICA_BATCH,
            "flops_per_step": step_flops,
            "bytes_per_step": step_bytes,
            "intensity_flop_per_byte": step_flops / step_bytes,
            "gradient_bytes": 4 * model.count_params(),
        },
    }


def ridge_withheld(limits: dict) -> str:
    """Why no ridge (peak / bandwidth) is given, as 3b gives no side of it (`verdict.ridge`), ""
    when one is: a limit's deciding set ran busy, or every set of a limit ran starved.

    >>> ridge_withheld({"peak": {"busy": True}, "bandwidth": {"busy": False}})
    'no ridge: the peak was measured on a busy machine, so it may be low'
    """
    why = [
        f"the {name} was measured on a busy machine"
        if limit.get("busy")
        else f"every {name} set ran starved"
        for name, limit in limits.items()
        if limit.get("busy")
        or (limit.get("starved") and len(limit["starved"]) == len(limit["fastest_of_each_set"]))
    ]
    return f"no ridge: {' and '.join(why)}, so it may be low" if why else ""


def measure_here(replicas: int, sizes: Sizes, *, machine: bool = False) -> dict:
    """Measure the four configurations for `replicas` replicas in THIS process (call it once);
    with `machine`, this machine's roofline figures too. Returns {"results": [...], "machine"}."""
    if sizes.steps % sizes.steps_per_call:
        raise ValueError(
            f"steps ({sizes.steps}) must be a multiple of steps per call ({sizes.steps_per_call})."
        )
    # TensorFlow only here, in the measuring process (the parent and a refused option need not
    # wait for it), and quietly, before the notebook's code imports Keras.
    import_tensorflow()
    code = notebook_code()
    mirrored = _strategy(replicas)
    loads: list[float] = []  # other programs' share of the cores per round, as notebook 3 reads it
    results = code["measure"](
        _trainers(code, mirrored, sizes),
        steps=sizes.steps,
        rounds=sizes.rounds,
        batch_size=PER_REPLICA_BATCH * replicas,
        loads=loads,
    )
    figures = machine_figures(mirrored, sizes) if machine else None
    return {"results": [asdict(r) for r in results], "machine": figures, "others_share": loads}


# ----------------------------------------------------------------------------------------------
# The benchmark: one fresh process per replica count
# ----------------------------------------------------------------------------------------------


def measure_in_fresh_process(
    replicas: int, devices: int, sizes: Sizes, *, machine: bool = False
) -> tuple[list[timing.RunResult], dict | None, list[float]]:
    """Run `measure_here(replicas, sizes, machine)` in a new Python process with `devices`
    devices; return its runs, (with `machine`) this machine's roofline figures, and the share of
    the cores other programs used during each of its rounds."""
    with tempfile.TemporaryDirectory() as folder:
        output = os.path.join(folder, "results.json")
        command = [
            sys.executable,
            "-m",
            "course_tools.bench",
            "--in-process",
            str(replicas),
            "--devices",
            str(devices),
            "--steps",
            str(sizes.steps),
            "--repeats",
            str(sizes.rounds),
            "--steps-per-call",
            str(sizes.steps_per_call),
            "--examples",
            str(sizes.examples),
            "--output",
            output,
            *(["--machine"] if machine else []),
        ]
        proc = subprocess.run(command, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(
                f"course bench: the measurement with {tables.count(replicas, 'replica')} failed "
                f"(exit {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
            )
        with open(output) as f:
            measured = json.load(f)
        return (
            [timing.RunResult(**row) for row in measured["results"]],
            measured["machine"],
            measured["others_share"],
        )


def _verdict(results: list[timing.RunResult], a: str, b: str, busy: float | None = None) -> dict:
    """`timing.compare` of runs `a` and `b`, with `busy`: the largest share of the cores other
    programs used during their rounds when above `timing.BUSY` (else None). The report then
    prints the ratio and no verdict, notebook 3's rule (`report_text`, `target_rows`)."""
    by_name = {r.name: r for r in results}
    return asdict(timing.compare(by_name[a], by_name[b])) | {"busy": busy}


def comparisons(
    results_by_replicas: dict[int, list[timing.RunResult]],
    sizes: Sizes,
    loads: dict[int, list[float]] | None = None,
) -> dict:
    """The benchmark's questions, each a `timing.compare` verdict (ratio, word, sentence), withheld
    for a replica count whose rounds ran on a busy machine (`loads`: each round's share of the
    cores other programs used, by replica count), as notebook 3 withholds it."""
    loads = loads or {}

    def busy(n: int) -> float | None:  # the busiest round's share, above timing.BUSY
        most = max(loads.get(n) or [0.0])
        return most if most > timing.BUSY else None

    verdicts = {}
    for n, results in results_by_replicas.items():
        m = f"MirroredStrategy({n})"
        verdicts[f"mirrored{n}_vs_no_strategy"] = _verdict(
            results, f"{m} + fit", "no strategy + fit", busy(n)
        )
    n = max(results_by_replicas)
    results, m = results_by_replicas[n], f"MirroredStrategy({n})"
    recommended = f"{m} + custom loop, {sizes.steps_per_call} steps/call"
    verdicts["custom_loop_vs_fit"] = _verdict(results, recommended, f"{m} + fit", busy(n))
    verdicts["classic_loop_vs_fit"] = _verdict(
        results, f"{m} + custom loop, 1 step/call", f"{m} + fit", busy(n)
    )
    verdicts["steps_per_call"] = _verdict(
        results, recommended, f"{m} + custom loop, 1 step/call", busy(n)
    )
    return verdicts


def target_rows(verdicts: dict) -> list[dict]:
    """Each target of TARGETS with the measured ratio and whether it is met: yes when the ratio
    of medians reaches the goal, no only when it does not and the noise rule found the
    configuration slower (`timing.compare`), else not judged (`note`: "busy", notebook 3's rule,
    or "within noise": the rounds cannot tell it from the other run)."""
    rows = []
    for key, goal in TARGETS.items():
        if key not in verdicts:
            continue
        found, met, note = verdicts[key], None, ""
        if found.get("busy"):
            note = "busy"
        elif found["speed_ratio"] >= goal or found["word"] == "slower":
            met = found["speed_ratio"] >= goal
        else:
            note = "within noise"
        row = {"measure": key, "value": round(found["speed_ratio"], 3), "target": f">= {goal:g}"}
        rows.append(row | {"met": met, "note": note})
    return rows


def run_benchmark(sizes: Sizes = FULL, devices: int = 2, *, verbose: bool = True) -> dict:
    """Measure 1 and `devices` replicas, each in a fresh process; return a JSON-ready report."""
    results_by_replicas, machine, loads = {}, None, {}
    for n in sorted({1, devices}):
        if verbose:
            print(
                f"MirroredStrategy({n}): warm-up, then {sizes.rounds} rounds of {sizes.steps} "
                f"steps per configuration, in a fresh process...",
                flush=True,
            )
        # The machine's figures with the most replicas: its all-reduce is the one to price.
        results_by_replicas[n], figures, loads[n] = measure_in_fresh_process(
            n, devices, sizes, machine=n == devices
        )
        machine = figures or machine
    verdicts = comparisons(results_by_replicas, sizes, loads)
    return {
        "replicas": sorted(results_by_replicas),
        "devices": devices,
        "sizes": asdict(sizes),
        "noise_rule": timing.NOISE_RULE,
        "configurations": {
            str(n): [asdict(r) for r in results] for n, results in results_by_replicas.items()
        },
        "others_share": {str(n): shares for n, shares in loads.items()},
        "comparisons": verdicts,
        "targets": target_rows(verdicts),
        "machine": machine,
    }


def report_text(report: dict) -> str:
    """The report as the text `course bench` prints."""
    lines = []
    for n, rows in report["configurations"].items():
        results = [timing.RunResult(**row) for row in rows]
        lines += [
            f"{tables.count(int(n), 'replica')}, fresh process:",
            timing.results_table(results),
            "",
        ]
    lines.append(f"Noise rule: {report['noise_rule']}")
    lines += [f"- {verdict_line(v)}" for v in report["comparisons"].values()]
    lines.append("")
    lines.append(
        timing.format_table(
            ["target", "ratio", "goal", "met"],
            [
                [
                    row["measure"],
                    f"{row['value']:.2f}x",
                    row["target"],
                    row["note"] if row["met"] is None else "yes" if row["met"] else "NO",
                ]
                for row in report["targets"]
            ],
        )
    )
    if report["sizes"]["rounds"] < FULL.rounds:  # as notebook 3 labels quick's verdicts
        lines.append(f"(quick's sizes, {report['sizes']['rounds']} rounds: a smoke test)")
    gpus = (report.get("machine") or {}).get("physical_gpus", 0)
    if report["devices"] > max(gpus, 1):  # logical devices: CPUs, or a GPU split (README: bench)
        shared = "the same cores" if not gpus else "fewer GPUs"
        lines.append(
            f"\nThe replicas are logical devices sharing {shared}: a ratio here is not a "
            "speed-up from more hardware (notebook 3 says what else moves it)."
        )
    machine = report.get("machine")
    if machine:
        reduce, model = machine["all_reduce"], machine["model"]
        lines += [
            "",
            "This machine (notebook 3b's roofline figures):",
            f"- peak {machine['peak_flops'] / 1e9:,.1f} GFLOP/s (matrix product), memory "
            f"bandwidth {machine['memory_bandwidth'] / 1e9:,.1f} GB/s, "
            + (machine.get("ridge_note") or ridge_words(machine)),
            *limit_spreads(machine.get("limits", {})),
            all_reduce_line(reduce),
            f"- model at {model['per_replica_batch']}/replica: intensity "
            f"{model['intensity_flop_per_byte']:.1f} FLOP/byte, gradients "
            f"{model['gradient_bytes'] / 1e6:.2f} MB",
        ]
    return "\n".join(lines)


def verdict_line(found: dict) -> str:
    """A comparison as the report prints it: its sentence, or on a busy machine its ratio and
    no verdict, as notebook 3 prints it.

    >>> verdict_line({"a": "x", "b": "y", "speed_ratio": 0.8, "busy": 0.7, "sentence": "..."})
    'x vs y: 0.80x, no verdict: other programs used up to 70% of the cores during the rounds'
    """
    if not found.get("busy"):
        return found["sentence"]
    return (
        f"{found['a']} vs {found['b']}: {found['speed_ratio']:.2f}x, no verdict: other programs "
        f"used up to {100 * found['busy']:.0f}% of the cores during the rounds"
    )


def ridge_words(machine: dict) -> str:
    """The ridge in words, at the limits' fastest rounds and across their ranges (as 3b prints).

    >>> ridge_words({"ridge_flop_per_byte": 4.6, "ridge_range": [4.5, 7.6]})
    "ridge 4.6 FLOP/byte at the limits' fastest rounds, 4.5 to 7.6 across their ranges"
    """
    said = f"ridge {machine['ridge_flop_per_byte']:.1f} FLOP/byte at the limits' fastest rounds"
    if machine.get("ridge_range"):  # a report from before the range was saved has none
        low, high = machine["ridge_range"]
        said += f", {low:.1f} to {high:.1f} across their ranges"
    return said + (" (quick's sizes: a smoke test)" if machine.get("quick_sizes") else "")


def all_reduce_line(reduce: dict) -> str:
    """The all-reduce's fit (notebook 3c's) as one line of the report, flagged as 3c withholds
    its call: a busy machine, a size the line misses, an alpha above a size's whole time."""
    where = f"- all-reduce over {tables.count(reduce['replicas'], 'replica')}"
    if "alpha_seconds" not in reduce:
        return f"{where}: nothing is sent, no line to fit"
    sizes, worst = reduce["sizes_bytes"], [reduce["worst_error"]]  # 3c's alpha rule
    fit = {"alpha": reduce["alpha_seconds"], "seconds": dict(zip(sizes, reduce["seconds"]))}
    contradicted = verdict.alpha_above(
        fit | {"errors": dict(zip(sizes, reduce.get("errors", worst)))}
    )
    return (
        f"{where} (notebook 3c's fit): alpha {reduce['alpha_seconds'] * 1e6:,.0f} us, beta "
        f"{reduce['beta_seconds_per_byte'] * 1e12:,.1f} ps/byte up to 1 MiB and "
        f"{reduce['beta_large_seconds_per_byte'] * 1e12:,.1f} from 4 to 16 MiB (intercept "
        f"{reduce['intercept_large_seconds'] * 1e6:,.0f} us; worst error "
        f"{100 * reduce['worst_error']:.1f}%), after {reduce['overhead_seconds'] * 1e6:.0f} us "
        "of loop subtracted"
        + (
            ""
            if reduce.get("within_tolerance", True)
            else f"\n  FLAG: the line misses a size by more than {100 * reduce['tolerance']:.0f}%"
        )
        + (
            f"\n  FLAG: the machine was busy: other programs used up to "
            f"{100 * max(reduce['others_share']):.0f}% of the cores during the rounds; as in "
            "notebook 3c, no call between alpha and the bytes: run again"
            if reduce.get("busy")
            else ""
        )
        + (
            f"\n  FLAG: {contradicted}; as in notebook 3c, no call: run again"
            if contradicted
            else ""
        )
    )


def limit_spreads(limits: dict) -> list[str]:
    """A line per limit: the fastest round (a lower bound) and its low end, a flag
    when the sets' fastest rounds disagree beyond `verdict.GAP`, and (when measured) the largest
    share of the cores other programs used during a set."""
    units = {"peak": "GFLOP/s", "bandwidth": "GB/s"}
    lines = []
    for name, limit in limits.items():
        gap = limit["set_gap"] > verdict.GAP  # the low end is then the slowest set's
        lines.append(
            f"  {name}: at least {limit['value'] / 1e9:,.1f} {units[name]} (fastest round); the "
            + ("slowest set's fastest, across the gap" if gap else "other sets' fastest")
            + f" {limit['low'] / 1e9:,.1f} "
            f"({100 * limit['low'] / limit['value']:.0f}%)"
        )
        if limit.get("others_share"):
            most = limit["deciding_share"]
            lines[-1] += f"; other programs used up to {100 * most:.0f}% of the cores meanwhile"
            if limit["busy"]:
                lines[-1] += (
                    f"\n  FLAG: the machine was busy: the {name} may be measured low, run again"
                )
        if limit["set_gap"] > verdict.GAP:
            lines[-1] += (
                f"\n  FLAG: the sets disagree: their fastest rounds {limit['set_gap']:.2f}x apart "
                f"(over {verdict.GAP}x), whatever the load: read the {name} at both ends"
            )
        if limit.get("starved"):
            lines[-1] += (
                f"\n  FLAG: {', '.join(limit['starved'])} ran starved (the fastest round under "
                f"{100 * verdict.STARVED:.0f}% of the usable cores' worth): the {name} may be low"
            )
    return lines


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `course bench`."""
    parser.add_argument("--quick", action="store_true", help="few steps and rounds: a smoke test")
    parser.add_argument(
        "--repeats",
        type=int,
        help=f"timed rounds (default {FULL.rounds}, quick {QUICK.rounds}); under {FULL.rounds}, "
        "the machine's limits and all-reduce are measured at quick's sizes too",
    )
    parser.add_argument(
        "--steps",
        type=int,
        help=f"timed steps per configuration and round (default {FULL.steps}, quick {QUICK.steps})",
    )
    parser.add_argument(
        "--steps-per-call",
        type=int,
        help=f"steps per tf.function call of the k-steps loop (default {FULL.steps_per_call})",
    )
    parser.add_argument("--examples", type=int, help="training examples loaded")
    parser.add_argument(
        "--devices",
        type=int,
        help="replicas of the distributed runs (default: COURSE_DEVICES, else 2 simulated CPUs "
        "or all GPUs)",
    )
    parser.add_argument("--output", help="also write the report as JSON to this file")
    parser.add_argument("--in-process", type=int, metavar="N", help=argparse.SUPPRESS)
    parser.add_argument("--machine", action="store_true", help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    """`course bench`: measure in fresh processes, print the report, optionally write JSON."""
    import course_utils

    for name in ("repeats", "steps", "steps_per_call", "examples", "devices"):
        value = getattr(args, name, None)
        if value is not None and value < 1:
            flag = "--" + name.replace("_", "-")
            print(f"course bench: {flag} must be at least 1 (got {value}).", file=sys.stderr)
            return 2
    base = QUICK if args.quick else FULL
    sizes = Sizes(
        steps=args.steps or base.steps,
        rounds=args.repeats or base.rounds,
        steps_per_call=args.steps_per_call or base.steps_per_call,
        examples=args.examples or base.examples,
    )
    if sizes.rounds < 2:
        print("course bench: --repeats must be at least 2 to judge the noise.", file=sys.stderr)
        return 2
    if sizes.rounds < FULL.rounds and not args.quick and args.in_process is None:
        print(
            f"course bench: --repeats under {FULL.rounds}: the machine's limits and all-reduce are "
            "measured at quick's sizes (a smoke test)",
            file=sys.stderr,
        )
    if sizes.steps % sizes.steps_per_call:
        print(
            f"course bench: --steps ({sizes.steps}) must be a multiple of --steps-per-call "
            f"({sizes.steps_per_call}).",
            file=sys.stderr,
        )
        return 2
    settings = course_utils.setup(
        devices=args.devices,
        profile="quick" if args.quick else None,
        verbose=args.in_process is None,
    )
    if args.in_process is not None:  # one replica count, in this (fresh) process
        measured = measure_here(args.in_process, sizes, machine=args.machine)
        with open(args.output, "w") as f:
            json.dump(measured, f)
        return 0
    report = run_benchmark(sizes, devices=settings.devices)  # setup() counted the devices
    print(report_text(report))
    if args.output:
        with open(args.output, "w") as f:
            json.dump(report, f, indent=2)
        print(f"\nWrote {args.output}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m course_tools.bench [--quick] ...`: the same as `course bench`."""
    parser = argparse.ArgumentParser(
        prog="course bench", description="Time single-device vs distributed training."
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
