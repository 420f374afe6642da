"""`course bench`: single device vs distributed training, each replica count in a fresh process.

It measures what notebook 3's section 2 measures, outside any notebook, with the notebook's own
model, input pipeline and trainers: they are written out in the notebook and repeated below, and
tests/test_bench.py fails when the two copies differ. For each replica count a new Python
process builds ONE `tf.distribute.MirroredStrategy` over that many devices (TensorFlow numbers the
collective groups of every MirroredStrategy from the same start, so two sizes in one process would
share groups) and times, with the notebook's `measure` (warm-up, interleaved rounds, medians):

1. no strategy + fit                                   the single-device baseline
2. MirroredStrategy(n) + fit                           n replicas (n = 1: the strategy's own cost)
3. MirroredStrategy(n) + custom loop, 1 step/call      the classic loop
4. MirroredStrategy(n) + custom loop, k steps/call     the course's recommended loop

Every configuration trains the same CNN on the same data with the same GLOBAL batch (per-replica
batch x n) for the same number of steps. Each comparison is judged by `timing.compare`'s noise rule.

Example:
    $ course bench --quick --output bench.json
    >>> from course_tools import bench
    >>> report = bench.run_benchmark(bench.QUICK, devices=2)   # spawns one process per count
    >>> print(bench.report_text(report))
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass

from course_utils import timing
from course_utils.quiet import import_tensorflow

tf = import_tensorflow()  # quietly, before Keras imports it
import keras  # noqa: E402

#: Per-replica batch of the course's notebooks (global batch = this x replicas).
PER_REPLICA_BATCH = 64
#: What the course's recommended settings should reach on any machine (speed ratios).
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
# The code of notebook 3, cell by cell (tests/test_bench.py checks that it is the notebook's)
# ----------------------------------------------------------------------------------------------


def make_model() -> keras.Model:
    return keras.Sequential(
        [
            keras.Input(shape=(28, 28, 1)),
            keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(64, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Flatten(),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(10),
        ]
    )


# As in notebook 3, the cache is not filled by a first complete pass (notebooks 1 and 2 do that):
# an example lost to TensorFlow's incomplete-cache bug changes which images a step sees, not how
# much work the step does, so the timings stand.
def training_pipeline(images: tf.data.Dataset, global_batch: int) -> tf.data.Dataset:
    return (
        images.cache()
        .shuffle(4096)
        .batch(global_batch, drop_remainder=True)
        .repeat()
        .prefetch(tf.data.AUTOTUNE)
    )


class StepClock(keras.callbacks.Callback):
    # Seconds from the start of the second step to the end of training.
    def on_train_batch_begin(self, batch, logs=None):
        if batch == 1:
            self.start = time.perf_counter()

    def on_train_end(self, logs=None):
        self.seconds = time.perf_counter() - self.start


def fit_trainer(strategy, dataset, jit_compile="auto"):
    # Returns train(steps): that many timed steps of model.fit (plus one untimed first step).
    with strategy.scope():
        model = make_model()
        model.compile(
            optimizer=keras.optimizers.Adam(1e-3),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            jit_compile=jit_compile,
        )
    clock = StepClock()

    def train(steps: int) -> float:
        model.fit(dataset, epochs=1, steps_per_epoch=steps + 1, verbose=0, callbacks=[clock])
        return clock.seconds

    train.model = model
    return train


def custom_loop_trainer(strategy, dataset, global_batch, steps_per_call, learning_rate=1e-3):
    # Returns train(steps): that many custom-loop steps (steps must divide by steps_per_call).
    with strategy.scope():
        model = make_model()
        optimizer = keras.optimizers.Adam(learning_rate)
        optimizer.build(model.trainable_variables)  # Adam's slots, before the first step
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)

    def replica_step(images, labels):
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            per_example = loss_fn(labels, logits)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss

    @tf.function
    def train_steps(iterator, count):
        total = tf.constant(0.0)
        for _ in tf.range(count):
            per_replica_loss = strategy.run(replica_step, args=next(iterator))
            total += strategy.reduce("SUM", per_replica_loss, axis=None)
        return total / tf.cast(count, tf.float32)

    iterator = iter(strategy.experimental_distribute_dataset(dataset))
    count = tf.constant(steps_per_call)

    def train(steps: int) -> None:
        for _ in range(steps // steps_per_call):
            loss = train_steps(iterator, count)
        float(loss)  # waits until the last step has finished

    train.model = model
    return train


def measure(runs, steps, rounds, batch_size):
    # Times each run's train(steps): once untimed, then in interleaved rounds. One
    # timing.RunResult per run. batch_size: the global batch, or a dict of them by run name.
    batches = batch_size if isinstance(batch_size, dict) else dict.fromkeys(runs, batch_size)
    results = {}
    for name, train in runs.items():
        with timing.Timer() as warmup:
            train(steps)  # tracing, graph building, filling the pipeline: never timed
        results[name] = timing.RunResult(
            name, 0.0, 0, batch_size=batches[name], warmup_seconds=warmup.seconds
        )
    for _round in range(rounds):
        for name, train in runs.items():  # back to back: a burst of load hits every run alike
            with timing.Timer() as timer:
                own_seconds = train(steps)  # fit's trainer returns its own clock's seconds
            seconds = timer.seconds if own_seconds is None else own_seconds
            result = results[name]
            result.rounds.append(steps * result.batch_size / seconds)
            result.seconds += seconds
            result.examples += steps * result.batch_size
    return list(results.values())


#: The names above that must stay identical to notebook 3's cells.
NOTEBOOK_CODE = (
    "make_model",
    "training_pipeline",
    "StepClock",
    "fit_trainer",
    "custom_loop_trainer",
    "measure",
)


# ----------------------------------------------------------------------------------------------
# One process: one strategy size
# ----------------------------------------------------------------------------------------------


def _trainers(replicas: int, sizes: Sizes) -> dict:
    """The four configurations of notebook 3's section 2 for `replicas` replicas."""
    from course_utils import data

    devices = [d.name for d in tf.config.list_logical_devices("GPU")] or [
        d.name for d in tf.config.list_logical_devices("CPU")
    ]
    if replicas > len(devices):
        raise ValueError(
            f"{replicas} replicas asked for, but this process has {len(devices)} logical "
            f"device(s). Set COURSE_DEVICES={replicas} (or pass --devices {replicas})."
        )
    batch = PER_REPLICA_BATCH * replicas
    mirrored = tf.distribute.MirroredStrategy(devices[:replicas])
    pipeline = training_pipeline(data.load("fashion_mnist", "train", limit=sizes.examples), batch)
    k = sizes.steps_per_call
    m = f"MirroredStrategy({replicas})"
    return {
        "no strategy + fit": fit_trainer(tf.distribute.get_strategy(), pipeline),
        f"{m} + fit": fit_trainer(mirrored, pipeline),
        f"{m} + custom loop, 1 step/call": custom_loop_trainer(mirrored, pipeline, batch, 1),
        f"{m} + custom loop, {k} steps/call": custom_loop_trainer(mirrored, pipeline, batch, k),
    }


def measure_here(replicas: int, sizes: Sizes) -> list[timing.RunResult]:
    """Measure the four configurations for `replicas` replicas in THIS process (call it once)."""
    if sizes.steps % sizes.steps_per_call:
        raise ValueError(
            f"steps ({sizes.steps}) must be a multiple of steps per call ({sizes.steps_per_call})."
        )
    trainers = _trainers(replicas, sizes)
    return measure(
        trainers,
        steps=sizes.steps,
        rounds=sizes.rounds,
        batch_size=PER_REPLICA_BATCH * replicas,
    )


# ----------------------------------------------------------------------------------------------
# The benchmark: one fresh process per replica count
# ----------------------------------------------------------------------------------------------


def measure_in_fresh_process(replicas: int, devices: int, sizes: Sizes) -> list[timing.RunResult]:
    """Run `measure_here(replicas, sizes)` in a new Python process with `devices` devices."""
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
        ]
        proc = subprocess.run(command, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(
                f"course bench: the measurement with {replicas} replica(s) failed "
                f"(exit {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
            )
        with open(output) as f:
            return [timing.RunResult(**row) for row in json.load(f)]


def _verdict(results: list[timing.RunResult], a: str, b: str) -> dict:
    by_name = {r.name: r for r in results}
    return asdict(timing.compare(by_name[a], by_name[b]))


def comparisons(results_by_replicas: dict[int, list[timing.RunResult]], sizes: Sizes) -> dict:
    """The benchmark's questions, each a `timing.compare` verdict (ratio, word, sentence)."""
    verdicts = {}
    for n, results in results_by_replicas.items():
        m = f"MirroredStrategy({n})"
        verdicts[f"mirrored{n}_vs_no_strategy"] = _verdict(
            results, f"{m} + fit", "no strategy + fit"
        )
    n = max(results_by_replicas)
    results, m = results_by_replicas[n], f"MirroredStrategy({n})"
    recommended = f"{m} + custom loop, {sizes.steps_per_call} steps/call"
    verdicts["custom_loop_vs_fit"] = _verdict(results, recommended, f"{m} + fit")
    verdicts["classic_loop_vs_fit"] = _verdict(
        results, f"{m} + custom loop, 1 step/call", f"{m} + fit"
    )
    verdicts["steps_per_call"] = _verdict(results, recommended, f"{m} + custom loop, 1 step/call")
    return verdicts


def target_rows(verdicts: dict) -> list[dict]:
    """Each target of TARGETS with the measured ratio and whether it is met."""
    return [
        {
            "measure": key,
            "value": round(verdicts[key]["speed_ratio"], 3),
            "target": f">= {goal:g}",
            "met": verdicts[key]["speed_ratio"] >= goal,
        }
        for key, goal in TARGETS.items()
        if key in verdicts
    ]


def run_benchmark(sizes: Sizes = FULL, devices: int = 2, verbose: bool = True) -> dict:
    """Measure 1 and `devices` replicas, each in a fresh process; return a JSON-ready report."""
    results_by_replicas = {}
    for n in sorted({1, devices}):
        if verbose:
            print(
                f"MirroredStrategy({n}): warm-up, then {sizes.rounds} rounds of {sizes.steps} "
                f"steps per configuration, in a fresh process...",
                flush=True,
            )
        results_by_replicas[n] = measure_in_fresh_process(n, devices, sizes)
    verdicts = comparisons(results_by_replicas, sizes)
    return {
        "replicas": sorted(results_by_replicas),
        "devices": devices,
        "sizes": asdict(sizes),
        "noise_rule": timing.NOISE_RULE,
        "configurations": {
            str(n): [asdict(r) for r in results] for n, results in results_by_replicas.items()
        },
        "comparisons": verdicts,
        "targets": target_rows(verdicts),
    }


def report_text(report: dict) -> str:
    """The report as the text `course bench` prints."""
    lines = []
    for n, rows in report["configurations"].items():
        results = [timing.RunResult(**row) for row in rows]
        lines += [f"{n} replica(s), fresh process:", timing.results_table(results), ""]
    lines.append(f"Noise rule: {report['noise_rule']}")
    lines += [f"- {v['sentence']}" for v in report["comparisons"].values()]
    lines.append("")
    lines.append(
        timing.format_table(
            ["target", "ratio", "goal", "met"],
            [
                [
                    row["measure"],
                    f"{row['value']:.2f}x",
                    row["target"],
                    "yes" if row["met"] else "NO",
                ]
                for row in report["targets"]
            ],
        )
    )
    lines.append(
        "\nSimulated CPU devices share the same cores: there, this measures overhead, not speed-up."
    )
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `course bench`."""
    parser.add_argument("--quick", action="store_true", help="few steps and rounds: a smoke test")
    parser.add_argument(
        "--repeats", type=int, help=f"timed rounds (default {FULL.rounds}, quick {QUICK.rounds})"
    )
    parser.add_argument(
        "--steps",
        type=int,
        help=f"timed steps per configuration and round (default {FULL.steps}, quick {QUICK.steps})",
    )
    parser.add_argument(
        "--steps-per-call",
        type=int,
        help=f"steps per tf.function call of the recommended loop (default {FULL.steps_per_call})",
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
        results = measure_here(args.in_process, sizes)
        with open(args.output, "w") as f:
            json.dump([asdict(r) for r in results], f)
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
