"""Time single-device and distributed training the same way, and say where the time goes.

Notebook 3 and the `course bench` command both use these functions. Every configuration trains
the same small CNN on the same data with the same GLOBAL batch; only the way of running it
changes (no strategy, MirroredStrategy over 1 or N devices, `fit` or a custom loop).

How the numbers are taken:
- Warm-up excluded: every run first trains a few steps (tracing, graph building, filling the
  input pipeline), and only later steps are timed.
- Interleaved rounds: each round times every configuration back to back, and this is repeated.
  A burst of load from another program then hits all configurations alike, and the ratios
  between configurations (computed round by round) stay meaningful on a busy machine.
- Median over rounds, which ignores a single slow round.

Example:
    >>> import course_utils
    >>> settings = course_utils.setup(devices=2)
    >>> from course_utils.tools import bench
    >>> batch = bench.global_batch(per_replica=64, replicas=2)
    >>> runs = [
    ...     bench.FitRun("no strategy + fit", bench.make_strategy(0), batch),
    ...     bench.CustomLoopRun(
    ...         "MirroredStrategy(2) + custom loop", bench.make_strategy(2), batch,
    ...         steps_per_call=20,
    ...     ),
    ... ]
    >>> results = bench.measure(runs, steps=40, rounds=5)
    >>> print(bench.results_table(results))

On the command line: `course bench [--quick] [--repeats N] [--output bench.json]`.
"""

from __future__ import annotations

import argparse
import atexit
import functools
import json
import os
import statistics
import sys
import threading
import time
from dataclasses import asdict, dataclass, field

from course_utils.quiet import import_tensorflow

tf = import_tensorflow()  # `import tensorflow as tf`, without its start-up log lines
import keras  # noqa: E402  (after TensorFlow's quiet import)

from course_utils import data  # noqa: E402
from course_utils.losses import scaled_loss  # noqa: E402
from course_utils.strategy import build_model_and_optimizer  # noqa: E402
from course_utils.strategy import make_strategy as _course_strategy  # noqa: E402

#: The dataset of this comparison: Fashion-MNIST, as in notebook 2.
DATASET = "fashion_mnist"
#: Per-replica batch of the course's notebooks (global batch = this x replicas).
PER_REPLICA_BATCH = 64
#: Steps per tf.function call in the course's recommended custom loop.
STEPS_PER_CALL = 20
#: Examples shuffled together; small enough to fill quickly, large enough to mix the classes.
SHUFFLE_BUFFER = 4096

#: What the course's recommended settings should reach on any machine (see `course bench`).
TARGETS = {
    "custom_loop_vs_fit": (">=", 0.95),
    "mirrored1_vs_no_strategy": (">=", 0.90),
    "input_wait_percent": ("<=", 5.0),
}


# ----------------------------------------------------------------------------------------------
# Devices, strategies, model, data
# ----------------------------------------------------------------------------------------------


def replica_devices(count: int | None = None) -> list[str]:
    """The first `count` logical devices a strategy can mirror over: GPUs when there are any, else
    CPUs.

    `None` means all of them. Asking for more than exist raises a ValueError that says what to do.
    """
    names = [d.name for d in tf.config.list_logical_devices("GPU")] or [
        d.name for d in tf.config.list_logical_devices("CPU")
    ]
    if count is None:
        return names
    if count > len(names):
        raise ValueError(
            f"{count} replicas asked for, but this kernel has {len(names)} logical device(s). "
            f"Set COURSE_DEVICES={count} (or call course_utils.setup(devices={count})) in a fresh "
            f"kernel."
        )
    return names[:count]


def make_strategy(replicas: int):
    """`0`: the default strategy (what plain Keras uses: no strategy at all).
    `n >= 1`: MirroredStrategy over the first n logical devices (`1` measures its pure overhead).

    Building MirroredStrategy over a subset of the devices lets one kernel compare 1, 2 and 4
    replicas: simulated devices are fixed for the life of the process, strategies are not.
    """
    if replicas == 0:
        return _course_strategy("default", verbose=False)
    return _mirrored(replicas)


@functools.cache
def _mirrored(replicas: int):
    # Every MirroredStrategy numbers its collective-communication groups from the same start, so
    # a second strategy over a different number of devices in the same process reuses group 1 and
    # its first all-reduce fails ("... is joining a group with size 2, but that group has size 4").
    # Each replica count therefore gets its own range of group numbers (TensorFlow's
    # `_collective_key_base`, a class attribute read once in the constructor), and one strategy
    # per count is reused.
    devices = replica_devices(replicas)
    saved = tf.distribute.MirroredStrategy._collective_key_base
    tf.distribute.MirroredStrategy._collective_key_base = 10_000 * replicas
    try:
        return _course_strategy("mirrored", devices=devices, verbose=False)
    finally:
        tf.distribute.MirroredStrategy._collective_key_base = saved


def strategy_name(strategy) -> str:
    """'no strategy' or 'MirroredStrategy(n)'."""
    if isinstance(strategy, tf.distribute.MirroredStrategy):
        return f"MirroredStrategy({strategy.num_replicas_in_sync})"
    return "no strategy"


def global_batch(per_replica: int, replicas: int) -> int:
    """Global batch = per-replica batch x replicas (no strategy counts as one replica)."""
    return per_replica * max(replicas, 1)


def on_gpus() -> bool:
    """Whether the strategies here run on GPUs (real or logical) rather than CPUs."""
    return bool(tf.config.list_logical_devices("GPU"))


def make_model(
    input_shape: tuple[int, int, int] = (28, 28, 1), num_classes: int = 10
) -> keras.Model:
    """The course's Fashion-MNIST CNN (two conv blocks, one hidden dense layer): about 120k
    weights."""
    return keras.Sequential(
        [
            keras.Input(shape=input_shape),
            keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(64, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Flatten(),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(num_classes),
        ]
    )


def make_dataset(
    batch_size: int,
    *,
    cache: bool = True,
    prefetch: bool = True,
    examples: int | None = None,
    name: str = DATASET,
):
    """An endless, shuffled, batched training pipeline: load -> [cache] -> shuffle -> batch ->
    repeat -> [prefetch].

    cache: keep the decoded examples in memory after the first pass (otherwise every epoch reads
        and decodes them again). prefetch: prepare the next batches while the model trains on this
        one. `examples` limits the training set (None: the profile's default, see `data.load`).
    Batches always have exactly `batch_size` examples (drop_remainder), so each step does equal
    work.
    """
    dataset = _cached_examples(name, examples) if cache else _examples(name, examples)
    dataset = dataset.shuffle(SHUFFLE_BUFFER).batch(batch_size, drop_remainder=True).repeat()
    if prefetch:
        dataset = dataset.prefetch(tf.data.AUTOTUNE)
    return dataset


@functools.cache
def _examples(name: str, examples: int | None):
    """The unbatched training examples, looked up once (COURSE_DATA=auto checks the network each
    time)."""
    return data.load(name, "train", limit=examples)


@functools.cache
def _cached_examples(name: str, examples: int | None):
    """The same, with `.cache()`: one in-memory copy shared by every pipeline built from it."""
    return _examples(name, examples).cache()


def _optimizer(learning_rate: float) -> keras.optimizers.Optimizer:
    return keras.optimizers.Adam(learning_rate)


# ----------------------------------------------------------------------------------------------
# The two ways of training, each able to time a number of steps
# ----------------------------------------------------------------------------------------------


class _StepClock(keras.callbacks.Callback):
    """Times a fit call from the start of its 2nd execution to the end of the epoch.

    It only uses `on_train_batch_begin` and `on_epoch_end`, so fit keeps its fast path: with no
    batch-END callback, Keras does not convert the logs to Python numbers after every step.
    `finished` is set when training ends (or fails).
    """

    def __init__(self) -> None:
        super().__init__()
        self.start = self.end = 0.0
        self.first_timed_step = 0
        self._executions = 0
        self.finished = threading.Event()

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        self._executions += 1
        if self._executions == 2:  # the 1st execution absorbs the per-fit-call start-up
            self.start = time.perf_counter()
            self.first_timed_step = batch

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self.end = (
            time.perf_counter()
        )  # Keras has just read the epoch's metrics: all steps are done

    def on_train_end(self, logs: dict | None = None) -> None:
        self.finished.set()


class FitRun:
    """`model.fit` under a strategy, ready to be timed a few steps at a time.

    steps_per_execution and jit_compile are passed to `compile` ("auto": Keras decides; it turns
    XLA off on CPU-only machines and under any tf.distribute strategy).
    """

    kind = "fit"

    def __init__(
        self,
        name: str,
        strategy,
        batch_size: int,
        *,
        steps_per_execution: int = 1,
        jit_compile: bool | str = "auto",
        learning_rate: float = 1e-3,
        cache: bool = True,
        prefetch: bool = True,
        examples: int | None = None,
    ) -> None:
        self.name, self.strategy, self.batch_size = name, strategy, batch_size
        self.replicas = strategy.num_replicas_in_sync
        self.steps_per_execution = steps_per_execution
        self.dataset = make_dataset(batch_size, cache=cache, prefetch=prefetch, examples=examples)
        with strategy.scope():
            self.model = make_model()
            self.model.compile(
                optimizer=_optimizer(learning_rate),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=["accuracy"],
                steps_per_execution=steps_per_execution,
                jit_compile=jit_compile,
            )
        self.jit_compile = self.model.jit_compile  # what Keras resolved "auto" to

    def time_steps(self, steps: int) -> tuple[float, int]:
        """Run one fit call of about `steps` steps; return (seconds, steps timed), the first
        execution excluded.

        fit runs in a helper thread, and this returns as soon as training has ended: when fit
        returns, Keras drops its distributed input iterator, and in TensorFlow 2.21 destroying
        one can take seconds (a tf.data thread finishes a timed sleep first). The helper thread
        absorbs that wait, so it neither delays the next measurement nor lands inside one.
        """
        executions = max(2, -(-steps // self.steps_per_execution))  # at least one timed execution
        clock = _StepClock()
        errors: list[BaseException] = []

        def train() -> None:
            try:
                self.model.fit(
                    self.dataset,
                    epochs=1,
                    steps_per_epoch=executions * self.steps_per_execution,
                    verbose=0,
                    shuffle=False,  # the dataset shuffles itself; Keras would only warn
                    callbacks=[clock],
                )
            except BaseException as error:  # noqa: BLE001  (handed to the caller below)
                errors.append(error)
                clock.finished.set()

        threading.Thread(target=train, name=f"fit {self.name}", daemon=True).start()
        clock.finished.wait()
        if errors:
            raise errors[0]
        timed = executions * self.steps_per_execution - clock.first_timed_step
        return clock.end - clock.start, timed


#: Distributed iterators made here, kept until the process ends (see CustomLoopRun.iterator_for).
_KEEP_ALIVE: list = []


class CustomLoopRun:
    """A custom training loop under a strategy (the course's notebook-2 loop), timed a few steps at
    a time.

    steps_per_call == 1: the classic loop, one `tf.function` call per step from a Python `for`.
    steps_per_call > 1: the loop over steps runs INSIDE one tf.function (`tf.range`), so Python
        and the function-call machinery run once per `steps_per_call` steps.
    jit_compile: compile each replica's forward and backward pass with XLA (the gradient
        all-reduce and the optimizer update stay outside XLA, so it works with several replicas).
    """

    kind = "custom loop"

    def __init__(
        self,
        name: str,
        strategy,
        batch_size: int,
        *,
        steps_per_call: int = STEPS_PER_CALL,
        jit_compile: bool = False,
        learning_rate: float = 1e-3,
        cache: bool = True,
        prefetch: bool = True,
        examples: int | None = None,
    ) -> None:
        self.name, self.strategy, self.batch_size = name, strategy, batch_size
        self.replicas = strategy.num_replicas_in_sync
        self.steps_per_call = steps_per_call
        self.jit_compile = jit_compile
        self.examples = examples
        self.model, self.optimizer = build_model_and_optimizer(
            strategy, make_model, lambda: _optimizer(learning_rate)
        )
        with strategy.scope():
            self.accuracy = keras.metrics.SparseCategoricalAccuracy()
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
        model, optimizer, accuracy = self.model, self.optimizer, self.accuracy

        def forward_backward(images, labels):
            with tf.GradientTape() as tape:
                logits = model(images, training=True)
                loss = scaled_loss(loss_fn(labels, logits), batch_size, model.losses)
            return loss, logits, tape.gradient(loss, model.trainable_variables)

        if jit_compile:
            forward_backward = tf.function(forward_backward, jit_compile=True)

        def replica_step(images, labels):
            loss, logits, gradients = forward_backward(images, labels)
            optimizer.apply_gradients(
                zip(gradients, model.trainable_variables)
            )  # sums gradients over replicas
            accuracy.update_state(labels, logits)
            return loss

        @tf.function
        def train_step(batch):
            """One step: each replica trains on its part of `batch`; returns the mean loss."""
            per_replica_loss = strategy.run(replica_step, args=batch)
            return strategy.reduce("SUM", per_replica_loss, axis=None)

        @tf.function
        def train_steps(iterator, count):
            """`count` steps inside one call; returns the mean loss over them."""
            total = tf.constant(0.0)
            for _ in tf.range(count):
                per_replica_loss = strategy.run(replica_step, args=next(iterator))
                total += strategy.reduce("SUM", per_replica_loss, axis=None)
            return total / tf.cast(count, tf.float32)

        self.train_step, self.train_steps = train_step, train_steps
        self._iterators: dict = {}
        self.cache, self.prefetch = cache, prefetch
        self.iterator = self.iterator_for(cache=cache, prefetch=prefetch)

    def iterator_for(self, *, cache: bool = True, prefetch: bool = True, free_input: bool = False):
        """This run's distributed iterator over a training pipeline (made once, then reused).

        free_input: replay ONE prepared batch forever, so getting input costs (almost) nothing;
        training on it shows how fast the steps would be if the input pipeline were free.

        Iterators are kept until the process ends, on purpose: in TensorFlow 2.21 destroying a
        distributed iterator can block for seconds (a tf.data background thread finishes a timed
        sleep first), which would stall whatever cell or measurement happened to drop it.
        """
        key = (cache, prefetch, free_input)
        if key not in self._iterators:
            dataset = make_dataset(
                self.batch_size, cache=cache, prefetch=prefetch, examples=self.examples
            )
            if free_input:
                dataset = dataset.take(1).cache().repeat()
            self._iterators[key] = iter(self.strategy.experimental_distribute_dataset(dataset))
            _KEEP_ALIVE.append(self._iterators[key])
        return self._iterators[key]

    def time_steps(self, steps: int, iterator=None) -> tuple[float, int]:
        """Train about `steps` steps (from `iterator`, default this run's own); return (seconds,
        steps)."""
        iterator = iterator or self.iterator
        start = time.perf_counter()
        if self.steps_per_call == 1:
            for _ in range(steps):
                loss = self.train_step(next(iterator))
        else:
            calls = max(1, round(steps / self.steps_per_call))
            count = tf.constant(self.steps_per_call)
            for _ in range(calls):
                loss = self.train_steps(iterator, count)
            steps = calls * self.steps_per_call
        float(loss)  # wait until the last step has really finished (GPUs run ahead of Python)
        return time.perf_counter() - start, steps


# ----------------------------------------------------------------------------------------------
# Measuring
# ----------------------------------------------------------------------------------------------


@dataclass
class Measurement:
    """Throughput of one configuration: the median over rounds, warm-up excluded."""

    name: str
    kind: str
    replicas: int
    batch_size: int
    examples_per_sec: float
    rounds: list[float] = field(default_factory=list)  # examples/s in each round
    warmup_seconds: float = 0.0
    settings: dict = field(default_factory=dict)

    @property
    def step_ms(self) -> float:
        """Milliseconds per training step at the median throughput."""
        return 1000 * self.batch_size / self.examples_per_sec if self.examples_per_sec else 0.0


def _settings(run) -> dict:
    keys = ("steps_per_execution", "steps_per_call", "jit_compile")
    return {k: getattr(run, k) for k in keys if hasattr(run, k)}


def measure(
    runs: list, steps: int, rounds: int, warmup_steps: int | None = None
) -> list[Measurement]:
    """Warm every run up, then time `steps` steps of each run per round, for `rounds` rounds.

    Returns one Measurement per run (median examples/s over the rounds).
    """
    warmup_steps = warmup_steps or max(2, steps // 4)
    warmups = []
    for run in runs:
        start = time.perf_counter()
        run.time_steps(warmup_steps)
        warmups.append(time.perf_counter() - start)
    per_round: list[list[float]] = [[] for _ in runs]
    for _ in range(rounds):
        for i, run in enumerate(runs):
            seconds, timed = run.time_steps(steps)
            per_round[i].append(timed * run.batch_size / seconds)
    return [
        Measurement(
            run.name,
            run.kind,
            run.replicas,
            run.batch_size,
            statistics.median(values),
            rounds=values,
            warmup_seconds=warmup,
            settings=_settings(run),
        )
        for run, values, warmup in zip(runs, per_round, warmups)
    ]


def ratio(results: list[Measurement], numerator: str, denominator: str) -> float:
    """Median over rounds of throughput(numerator) / throughput(denominator), runs picked by name.

    Round by round, so both sides of each ratio were measured moments apart.
    """
    return statistics.median(ratio_per_round(results, numerator, denominator))


def ratio_per_round(results: list[Measurement], numerator: str, denominator: str) -> list[float]:
    """throughput(numerator) / throughput(denominator) per round: the spread shows the noise."""
    by_name = {m.name: m for m in results}
    return [a / b for a, b in zip(by_name[numerator].rounds, by_name[denominator].rounds)]


def results_table(results: list[Measurement], baseline: str | None = None) -> str:
    """A text table: examples/s, ms per step and speed relative to `baseline` (default: the first
    row)."""
    base = next((m for m in results if m.name == baseline), results[0])
    rows = [
        ("configuration", "replicas", "global batch", "examples/s", "ms/step", f"vs {base.name}")
    ]
    for m in results:
        rows.append(
            (
                m.name,
                str(m.replicas),
                str(m.batch_size),
                f"{m.examples_per_sec:,.0f}",
                f"{m.step_ms:.1f}",
                f"{m.examples_per_sec / base.examples_per_sec:.2f}x",
            )
        )
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    lines = [
        "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
        for r in rows
    ]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def as_run_results(results: list[Measurement], steps: int = 1000):
    """The measurements as `course_utils.timing.RunResult`s (for `timing.plot_comparison`)."""
    from course_utils.timing import RunResult

    return [
        RunResult(m.name, steps * m.batch_size / m.examples_per_sec, steps * m.batch_size)
        for m in results
    ]


def allreduce_ms(strategy, model: keras.Model, calls: int = 20) -> float:
    """Milliseconds to all-reduce (sum over replicas) tensors shaped like the model's weights.

    That is the gradient exchange each synchronous step needs, timed on its own (warm-up excluded).
    """
    shapes = [v.shape for v in model.trainable_variables]

    def replica_fn():
        return tf.distribute.get_replica_context().all_reduce(
            "SUM", [tf.ones(shape) for shape in shapes]
        )

    @tf.function
    def exchange():
        return strategy.run(replica_fn)

    return _ms_per_call(exchange, calls)


def dispatch_ms(strategy, calls: int = 50) -> float:
    """Milliseconds for one call of a tf.function that runs an EMPTY step on every replica.

    This is the fixed price of each call from Python (function call, per-replica dispatch, sync),
    which the classic one-step-per-call loop pays every step.
    """

    @tf.function
    def empty_step():
        return strategy.run(lambda: tf.constant(0.0))

    return _ms_per_call(empty_step, calls)


def _ms_per_call(function, calls: int) -> float:
    result = function()  # trace and warm up
    start = time.perf_counter()
    for _ in range(calls):
        result = function()
    for tensor in tf.nest.flatten(
        result, expand_composites=True
    ):  # wait for the last call to finish
        tensor.numpy()
    return 1000 * (time.perf_counter() - start) / calls


@dataclass
class InputWait:
    """How much slower training runs with a real input pipeline than with input for free.

    `percent` = (step time with the pipeline - step time with free input) / step time with the
    pipeline, median over rounds: the share of each step that goes to getting input, whether the
    model waits for a batch or the pipeline takes CPU time from the model. Noise can make it
    slightly negative.
    """

    name: str
    step_ms: float
    free_input_step_ms: float
    percent: float
    rounds: list[float] = field(default_factory=list)  # percent in each round


def input_wait(
    run: CustomLoopRun,
    steps: int,
    rounds: int,
    *,
    cache: bool = True,
    prefetch: bool = True,
    warmup_steps: int = 4,
) -> InputWait:
    """Time `run`'s model on a (cache, prefetch) pipeline and on free input, alternately, for
    `rounds` rounds."""
    name = f"cache {'on' if cache else 'off'}, prefetch {'on' if prefetch else 'off'}"
    real = run.iterator_for(cache=cache, prefetch=prefetch)
    free = run.iterator_for(free_input=True)
    run.time_steps(warmup_steps, real)
    run.time_steps(warmup_steps, free)
    real_ms, free_ms, percents = [], [], []
    for _ in range(rounds):
        seconds, timed = run.time_steps(steps, real)
        real_ms.append(1000 * seconds / timed)
        seconds, timed = run.time_steps(steps, free)
        free_ms.append(1000 * seconds / timed)
        percents.append(100 * (real_ms[-1] - free_ms[-1]) / real_ms[-1])
    return InputWait(
        name,
        statistics.median(real_ms),
        statistics.median(free_ms),
        statistics.median(percents),
        percents,
    )


def input_table(waits: list[InputWait]) -> str:
    """A text table of input-wait measurements."""
    rows = [("input pipeline", "ms/step", "ms/step, free input", "input share")]
    rows += [
        (w.name, f"{w.step_ms:.1f}", f"{w.free_input_step_ms:.1f}", f"{w.percent:.1f}%")
        for w in waits
    ]
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    lines = [
        "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
        for r in rows
    ]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def error_summary(error: BaseException) -> str:
    """The line of a TensorFlow error that says what went wrong (the first is often just 'Graph
    execution error:')."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    telling = [line for line in lines if "must feed a value" in line or "Trying to access" in line]
    return f"{type(error).__name__}: {(telling or lines or [''])[0]}"


# ----------------------------------------------------------------------------------------------
# The benchmark command
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sizes:
    """How much to measure: timed steps per round, rounds, training examples loaded."""

    steps: int
    rounds: int
    examples: int


FULL = Sizes(steps=60, rounds=5, examples=16384)
QUICK = Sizes(steps=10, rounds=2, examples=2048)


def core_runs(
    replicas: int,
    per_replica: int = PER_REPLICA_BATCH,
    examples: int | None = None,
    steps_per_call: int = STEPS_PER_CALL,
) -> list:
    """The comparison at the heart of notebook 3, all with the same global batch (per_replica x
    replicas).

    1. no strategy + fit                      the single-device baseline
    2. MirroredStrategy(1) + fit              the strategy's own overhead, with nothing to exchange
    3. MirroredStrategy(N) + fit              N replicas
    4. MirroredStrategy(N) + custom loop, 1 step/call            the classic tutorial loop
    5. MirroredStrategy(N) + custom loop, steps_per_call/call    the course's recommended loop
    On GPUs, XLA (jit_compile) is on wherever it works (Keras cannot use it in fit with 2+
    replicas).
    """
    batch = global_batch(per_replica, replicas)
    xla = on_gpus()
    mirrored = make_strategy(replicas)
    n = f"MirroredStrategy({replicas})"
    runs = [
        FitRun("no strategy + fit", make_strategy(0), batch, jit_compile=xla, examples=examples),
        FitRun(
            "MirroredStrategy(1) + fit", make_strategy(1), batch, jit_compile=xla, examples=examples
        ),
    ]
    if replicas > 1:
        runs.append(FitRun(f"{n} + fit", mirrored, batch, jit_compile=False, examples=examples))
    runs += [
        CustomLoopRun(
            f"{n} + custom loop, 1 step/call",
            mirrored,
            batch,
            steps_per_call=1,
            jit_compile=xla,
            examples=examples,
        ),
        CustomLoopRun(
            f"{n} + custom loop, {steps_per_call} steps/call",
            mirrored,
            batch,
            steps_per_call=steps_per_call,
            jit_compile=xla,
            examples=examples,
        ),
    ]
    return runs


def core_ratios(results: list[Measurement], wait: InputWait | None = None) -> dict[str, float]:
    """The benchmark's ratios from `measure(core_runs(...))` (and the input wait, when given)."""
    replicas = max(m.replicas for m in results)
    fit_n = f"MirroredStrategy({replicas}) + fit"
    loops = sorted(
        (m for m in results if m.kind == "custom loop"), key=lambda m: m.settings["steps_per_call"]
    )
    classic, recommended = loops[0].name, loops[-1].name  # 1 step per call, many steps per call
    ratios = {
        "custom_loop_vs_fit": ratio(results, recommended, fit_n),
        "classic_loop_vs_fit": ratio(results, classic, fit_n),
        "mirrored1_vs_no_strategy": ratio(
            results, "MirroredStrategy(1) + fit", "no strategy + fit"
        ),
        f"mirrored{replicas}_vs_no_strategy": ratio(results, fit_n, "no strategy + fit"),
    }
    if wait is not None:
        ratios["input_wait_percent"] = wait.percent
    return ratios


def target_rows(ratios: dict[str, float]) -> list[dict]:
    """Each target of TARGETS that was measured, with its value and whether it is met."""
    rows = []
    for key, (op, goal) in TARGETS.items():
        if key in ratios:
            value = ratios[key]
            met = value >= goal if op == ">=" else value <= goal
            rows.append(
                {
                    "measure": key,
                    "value": round(value, 3),
                    "target": f"{op} {goal:g}",
                    "met": bool(met),
                }
            )
    return rows


def targets_text(ratios: dict[str, float]) -> str:
    """The ratios as text lines, with the target and whether it is met where there is one."""
    targets = {row["measure"]: row for row in target_rows(ratios)}
    lines = [f"{'measure':<32} {'value':>7}  {'target':<8} met"]
    for key, value in ratios.items():
        shown = f"{value:.1f}%" if key.endswith("percent") else f"{value:.2f}x"
        row = targets.get(key)
        lines.append(
            f"{key:<32} {shown:>7}  "
            + (f"{row['target']:<8} {'yes' if row['met'] else 'NO'}" if row else "")
        )
    return "\n".join(lines)


def run_benchmark(sizes: Sizes = FULL, replicas: int | None = None, verbose: bool = True) -> dict:
    """Run the core comparison and the input-wait measurement; return a JSON-ready report."""
    replicas = replicas or len(replica_devices())
    runs = core_runs(replicas, examples=sizes.examples)
    if verbose:
        print(
            f"Timing {len(runs)} configurations: warm-up, then {sizes.rounds} rounds of "
            f"{sizes.steps} steps each; global batch {runs[0].batch_size}, {replicas} replica(s) "
            f"on {'GPU' if on_gpus() else 'CPU'}...",
            flush=True,
        )
    results = measure(runs, steps=sizes.steps, rounds=sizes.rounds)
    wait = input_wait(runs[-1], steps=sizes.steps, rounds=sizes.rounds)
    ratios = core_ratios(results, wait)
    return {
        "device": "GPU" if on_gpus() else "CPU",
        "replicas": replicas,
        "global_batch": results[0].batch_size,
        "steps_per_round": sizes.steps,
        "rounds": sizes.rounds,
        "configurations": [asdict(m) | {"step_ms": m.step_ms} for m in results],
        "input_wait": asdict(wait),
        "ratios": ratios,
        "targets": target_rows(ratios),
    }


def report_text(report: dict) -> str:
    """The benchmark report as the text `course bench` prints."""
    results = [
        Measurement(**{k: v for k, v in c.items() if k != "step_ms"})
        for c in report["configurations"]
    ]
    wait = InputWait(**report["input_wait"])
    lines = [
        results_table(results),
        "",
        "Input wait, recommended custom loop:",
        input_table([wait]),
        "",
        targets_text(report["ratios"]),
    ]
    if report["device"] == "CPU" and report["replicas"] > 1:
        lines.append(
            "\nSimulated CPU devices share the same cores: this measures overhead, not speed-up."
        )
    lines.append(
        "Timings vary with other load on the machine: compare ratios, and re-run to see the spread."
    )
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `course bench`."""
    parser.add_argument(
        "--quick", action="store_true", help="few steps and rounds: a smoke test (under a minute)"
    )
    parser.add_argument(
        "--repeats",
        type=int,
        help=f"timed rounds, median reported (default {FULL.rounds}, quick {QUICK.rounds})",
    )
    parser.add_argument(
        "--steps",
        type=int,
        help=f"timed steps per configuration and round (default {FULL.steps}, quick {QUICK.steps})",
    )
    parser.add_argument(
        "--devices",
        type=int,
        help="replicas for the distributed runs (default: COURSE_DEVICES, else 2 simulated CPUs or "
        "all GPUs)",
    )
    parser.add_argument("--output", help="also write the report as JSON to this file")


def run(args: argparse.Namespace) -> int:
    """`course bench`: set up devices, run the benchmark, print it, optionally write JSON."""
    import course_utils

    for name in ("repeats", "steps", "devices"):
        value = getattr(args, name, None)
        if value is not None and value < 1:
            print(f"course bench: --{name} must be at least 1 (got {value}).", file=sys.stderr)
            return 2
    base = QUICK if args.quick else FULL
    sizes = Sizes(
        steps=args.steps or base.steps, rounds=args.repeats or base.rounds, examples=base.examples
    )
    course_utils.setup(devices=args.devices, profile="quick" if args.quick else None, verbose=True)
    report = run_benchmark(sizes)
    print(report_text(report))
    if args.output:
        with open(args.output, "w") as f:
            json.dump(report, f, indent=2)
        print(f"\nWrote {args.output}")
    _exit_without_teardown(0)
    return 0


def _exit_without_teardown(code: int) -> None:
    """When the process ends, end it at once instead of letting TensorFlow tear down its iterators.

    TensorFlow 2.21 can take minutes to destroy the benchmark's distributed tf.data iterators at
    exit (each waits for a sleeping tf.data thread; sometimes it never returns). The report is
    printed and written by then, so the command skips that teardown. Only the `course bench`
    command does this, at exit; calling the functions above from Python is unaffected.
    """

    def leave() -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    atexit.register(leave)


def main(argv: list[str] | None = None) -> int:
    """`python -m course_utils.tools.bench [--quick] ...`: the same as `course bench`."""
    parser = argparse.ArgumentParser(
        prog="course bench", description="Time single-device vs distributed training."
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
