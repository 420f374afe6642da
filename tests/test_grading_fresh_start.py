"""Where each graded model's training started (`grade.core.fresh`): the grader's record of every
optimizer's first step, taken in the kernel, measured by the probe, judged by the checks.

- the rule on synthetic numbers (`fresh.fresh_start`, `checks.assert_fresh_start`), the hook's
  removal read as tampering (`checker._facts`), the routes to the record the reading flags;
- the hook and the probe in a plain Python process (no kernel), the starts measured from the
  probe's file as the check process does (`checks.measure_starts`): a fresh model's start
  passes, a model given trained weights before `fit`, through `BackupAndRestore`, or before a
  custom loop fails, and a wrapped method replaced is reported; continuity: weights given after
  the first step (a custom loop's own first step then a load, a callback loading at
  `on_train_batch_end(0)`, a load after the last step) fail, and honest runs (evaluate, predict
  and saves between steps, checkpoints, `steps_per_execution`, a second optimizer never stepped,
  EMA, a restore into a new model, two optimizers over two parts of a model) stay clean; a layer
  frozen during `fit` fails (no record covers it), and so do weights stepped by a second
  optimizer after the first had started (compile again; red team 32a's jump to a donor's
  weights through a new SGD's second step);
- red team 31a's routes to a start that lies: an optimizer subclass whose properties walk the
  hook's frames to its record (never run there now), and the course's loader pointed at
  examples of the notebook's (`os.environ`; the check process measures on its own);
- red team 30a's three routes of weights from elsewhere through `course grade` (one submission:
  each route loses the points of the model it touches). The completed exercise keeps 12/12 in
  tests/test_grading.py's batch ("solution").

Run: pytest tests/test_grading_fresh_start.py  (about 5 minutes on 2 cores).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from grading_submissions import ENV, ROOT, completed_exercise, donor_weights, write
from helpers import require_or_skip

from course_tools.grade.core import checker, checks, fresh, plan, reading
from course_tools.grade.jail import sandbox
from course_tools.grade.routes import batch as grading_batch
from course_tools.runner import Limits

FRESH = {"loss": 2.30, "accuracy": 0.1, "after_loss": 2.29, "after_accuracy": 0.11, "steps": 1}


def test_the_threshold_sits_between_fresh_and_given_starts():
    # the measured ranges (fresh.START_LOSS_AT_LEAST's comment): fresh 2.264-2.462 with an
    # accuracy of 0.064-0.240, given 0.159-1.246 with 0.848-0.932
    for loss, accuracy in [(2.264, 0.24), (2.462, 0.064), (2.0, 0.3), (3.5, 0.0)]:
        assert fresh.fresh_start({"loss": loss, "accuracy": accuracy})
    for loss, accuracy in [(1.246, 0.848), (0.159, 0.932), (1.79, 0.2), (2.29, 0.9), (2.3, 0.41)]:
        assert not fresh.fresh_start({"loss": loss, "accuracy": accuracy})
    for broken in [{}, {"loss": None, "accuracy": 0.1}, {"loss": float("nan"), "accuracy": 0.1}]:
        assert not fresh.fresh_start(broken)
    assert not fresh.fresh_start({"loss": True, "accuracy": 0.1})


def test_a_start_far_from_chance_fails_the_model_before_or_after_its_first_step():
    checks.assert_fresh_start({"starts": [FRESH]}, "fit_model")
    checks.assert_fresh_start({}, "fit_model")  # no hook (the solution's own kernel): skipped
    given = {**FRESH, "loss": 0.18, "accuracy": 0.95}
    with pytest.raises(checks.CheckError, match=r"`custom_model` did not start .* just before"):
        checks.assert_fresh_start({"starts": [given]}, "custom_model")
    inside = {**FRESH, "after_loss": 0.2, "after_accuracy": 0.94}  # given inside the first step
    with pytest.raises(checks.CheckError, match="just after"):
        checks.assert_fresh_start({"starts": [FRESH, inside]}, "fit_model")
    # a first call of several steps (steps_per_execution) may train: only its start is judged
    checks.assert_fresh_start({"starts": [{**inside, "steps": 8}]}, "fit_model")
    with pytest.raises(checks.CheckError, match="`single_model` started: .* made 0 steps"):
        checks.assert_fresh_start({"start_error": "no step of an optimizer"}, "single_model")
    with pytest.raises(checks.CheckError, match="cannot tell where the training of `single"):
        checks.assert_fresh_start({"start_error": "ValueError: clone"}, "single_model")
    with pytest.raises(checks.CheckError, match="cannot tell"):
        checks.assert_fresh_start({"starts": []}, "single_model")
    checks.assert_continuity({"starts": [FRESH], "changed": []}, "custom_model")
    checks.assert_continuity({}, "custom_model")  # no hook: nothing to judge
    late = {"optimizer": "Adam", "steps": [1], "call": 9, "largest": 0.5, "where": "a call"}
    with pytest.raises(checks.CheckError, match=r"weights of `custom_model` changed between two"):
        checks.assert_continuity({"starts": [FRESH], "changed": [late]}, "custom_model")


def test_a_removed_hook_is_tampering_and_the_routes_to_the_record_are_flagged():
    job = {"facts": {"models": {}, "start_hook": "`BaseOptimizer.build` is not the grader's"}}
    tampered = checker._facts(job)["tampered"]
    assert any("first optimizer step" in t and "BaseOptimizer.build" in t for t in tampered)
    assert "tampered" not in checker._facts({"facts": {"models": {}}})
    for line in [
        "import gc\nkept = [o for o in gc.get_objects() if isinstance(o, dict)]",
        "import inspect\nv = inspect.getclosurevars(keras.optimizers.Adam.build)",
        "cells = keras.optimizers.Adam.build.__closure__",
        "x = cell.cell_contents",
        # red team 32a: every attribute of a wrapped method, its globals (the record) among them
        "import inspect\ng = inspect.getmembers(type(tf.function(lambda: 0)).__call__)",
    ]:
        code = reading.Code.of({"cells": [{"number": 1, "source": line}]})
        assert set(code.shell_reached()) & reading.GRADER_STATE_NAMES, line
    # red team 33a: listing a module's members reaches no wrapped method (an honest line), but a
    # class, a method or a name the notebook binds stays flagged
    for line, flagged in [
        ("import inspect, keras\nc = inspect.getmembers(keras.callbacks, inspect.isclass)", False),
        ("import inspect\nimport tensorflow as tf\nx = inspect.getmembers(tf.keras.layers)", False),
        ("import inspect, keras\nx = inspect.getmembers(keras.optimizers.Adam.build)", True),
        ("import inspect, keras\nkeras = 1\nx = inspect.getmembers(keras)", True),
        ("from inspect import getmembers\nimport keras\nx = getmembers(keras.Model)", True),
        ("import inspect, keras\nx = inspect.getmembers(keras.__dict__)", True),
        ("import inspect, keras\nf = keras.optimizers.Adam.apply\ng = inspect.getmembers(f)", True),
        (
            "from keras.optimizers import Adam as adam\nimport inspect\ny = inspect.getmembers"
            "(adam)",
            True,
        ),
    ]:
        code = reading.Code.of({"cells": [{"number": 1, "source": line}]})
        assert bool(set(code.shell_reached()) & reading.GRADER_STATE_NAMES) == flagged, line


#: Run in a plain Python process: the hook installed first (as the grader's first expression
#: does), then the course's set-up, Keras, and models started fresh or given trained weights.
SCRIPT = """
import json, os, sys
from course_tools.grade.core import probe  # imports no Keras: the hook is installed before it
PATH = probe.__file__.rpartition("/")[0] + "/fresh.py"  # where the probe looks for the hook
exec(compile(open(PATH).read() + "\\ninstall()\\n", PATH, "exec"), {"__name__": "fresh"})
import course_utils
course_utils.setup(verbose=False)
import keras, tensorflow as tf
import numpy as np
from course_utils import data
from course_tools.grade.core import checker, checks

def make_model():
    return keras.Sequential([
        keras.Input(shape=(32, 32, 3)), keras.layers.Conv2D(8, 3, activation="relu"),
        keras.layers.MaxPooling2D(), keras.layers.Flatten(), keras.layers.Dense(10),
    ])

def compiled(model):
    model.compile(optimizer=keras.optimizers.Adam(),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model

train_ds = data.load("svhn_cropped", "train").batch(64)
strategy = tf.distribute.MirroredStrategy()
found, examples = {}, []
state, why = probe.start_state()
assert not why, why

def start(name, model):
    probe.check_continuity()  # as the probe does after the last cell
    records, arrays = probe.start_records(state)
    fact = probe.start_weights(model, 0, arrays)
    fact["changed"] = probe.changes(set(fact["start_weights"]["ids"]), state)  # as collect
    # through the file, as the check process reads it
    arrays = checker._start_arrays(probe.start_export(arrays, "."), checker.Path("."))
    if not examples:
        examples.append(checker._start_examples())
    fact.update(checks.measure_starts(fact, records, arrays, model, examples[0]))
    found[name] = fact

keras.utils.set_random_seed(1)
fresh = compiled(make_model())
fresh.fit(train_ds, epochs=1, steps_per_epoch=2, verbose=0)
start("fresh fit", fresh)
donor = compiled(make_model())
donor.fit(train_ds, epochs=4, verbose=0)
given = compiled(make_model())
given.set_weights(donor.get_weights())
given.fit(train_ds, epochs=1, steps_per_epoch=2, verbose=0)
start("given fit", given)
handed = compiled(make_model())
handed.set_weights(donor.get_weights())
handed.optimizer.build(handed.trainable_variables)
os.makedirs("bk", exist_ok=True)
handed.save_weights("bk/latest.weights.h5")
restored = compiled(make_model())
restored.fit(train_ds, epochs=1, steps_per_epoch=2, verbose=0,
             callbacks=[keras.callbacks.BackupAndRestore("bk")])
start("BackupAndRestore", restored)
loss_object = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def looped(model, optimizer):  # a custom loop's distributed step for `model`
    def step(inputs):
        images, labels = inputs
        with tf.GradientTape() as tape:
            loss = loss_object(labels, model(images, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function
    def train_step(inputs):
        return strategy.reduce("SUM", strategy.run(step, args=(inputs,)), axis=None)

    return train_step

for name, weights in (("fresh loop", None), ("given loop", donor.get_weights())):
    with strategy.scope():
        model = make_model()
        optimizer = keras.optimizers.Adam()
        optimizer.build(model.trainable_variables)
    if weights is not None:
        model.set_weights(weights)
    train_step = looped(model, optimizer)
    for i, batch in zip(range(2), strategy.experimental_distribute_dataset(train_ds)):
        train_step(batch)
    start(name, model)
never = make_model()
start("never trained", never)

# continuity: weights given after the first step, and what honest runs do between steps

def loaded_after_first_step():  # the loop's own first step, then a load, two more steps
    keras.utils.set_random_seed(2)
    with strategy.scope():
        model = make_model()
        optimizer = keras.optimizers.Adam()
        optimizer.build(model.trainable_variables)
    train_step = looped(model, optimizer)
    for i, batch in zip(range(3), strategy.experimental_distribute_dataset(train_ds)):
        train_step(batch)
        if i == 0:
            model.set_weights(donor.get_weights())
    return model

start("loop loaded after its first step", loaded_after_first_step())
# red team 33b: the same, then every layer frozen before the probe (judged all the same)
model = loaded_after_first_step()
for layer in model.layers:
    layer.trainable = False
start("loaded, then frozen before the probe", model)

class LoadAtFirstBatchEnd(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if batch == 0:
            self.model.set_weights(donor.get_weights())

keras.utils.set_random_seed(3)
late = compiled(make_model())
late.fit(train_ds, epochs=1, steps_per_epoch=3, verbose=0, callbacks=[LoadAtFirstBatchEnd()])
start("fit loaded at on_train_batch_end(0)", late)
ended = compiled(make_model())
ended.fit(train_ds, epochs=1, steps_per_epoch=2, verbose=0)
ended.set_weights(donor.get_weights())  # after the last step: the probe compares at its end
start("loaded after the last step", ended)

# honest: evaluate and predict between steps, saves, ModelCheckpoint, BackupAndRestore's saving,
# steps_per_execution, a second optimizer never stepped, EMA
keras.utils.set_random_seed(4)
honest = make_model()  # no strategy: Keras 3.15's steps_per_execution fails under one at 2 devices
honest.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
               steps_per_execution=2)
spare = keras.optimizers.Adam()
spare.build(honest.trainable_variables)  # never stepped

class Between(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        self.model.evaluate(train_ds.take(1), verbose=0)
        self.model.predict(next(iter(train_ds))[0], verbose=0)
        self.model.save_weights("between.weights.h5")

saver = keras.callbacks.ModelCheckpoint("ck_{epoch}.weights.h5", save_weights_only=True)
honest.fit(train_ds, epochs=2, steps_per_epoch=4, verbose=0,
           callbacks=[Between(), saver, keras.callbacks.BackupAndRestore("bk_honest")])
honest.evaluate(train_ds.take(2), verbose=0)
honest.save("honest.keras")
restored_new = make_model()
restored_new.load_weights("ck_2.weights.h5")  # into a new model (question 6)
restored_new.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
restored_new.evaluate(train_ds.take(1), verbose=0)
start("honest fit between steps", honest)
ema = make_model()
ema.compile(optimizer=keras.optimizers.Adam(use_ema=True, ema_overwrite_frequency=2),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
ema.fit(train_ds, epochs=2, steps_per_epoch=3, verbose=0,
        callbacks=[keras.callbacks.SwapEMAWeights(swap_on_epoch=True)])
ema.evaluate(train_ds.take(1), verbose=0)
start("EMA", ema)
# red team 34a: nudges each within the EMA tolerance of the last look, a call after each, used to
# add up (the copy was refreshed on every accepted look): 30 x 0.8e-6 is 24 times the tolerance
nudged = make_model()
nudged.compile(optimizer=keras.optimizers.Adam(use_ema=True),
               loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
nudged.fit(train_ds, epochs=1, steps_per_epoch=2, verbose=0)
poke = tf.function(lambda: tf.constant(0))
for _ in range(30):
    for variable in nudged.trainable_variables:
        variable.assign(variable + 0.8e-6)  # fresh.EMA_TOLERANCE is 1e-6 (the test says so)
    poke()  # a call: the hook compares there
start("EMA nudged within its tolerance", nudged)

# honest: the model's own earlier weights put back, by EarlyStopping at the end of fit (the best
# epoch by its monitor here is the first) and by its own first epoch's checkpoint loaded after
keras.utils.set_random_seed(8)
early = compiled(make_model())
stopper = keras.callbacks.EarlyStopping(monitor="loss", mode="max", patience=10,
                                        restore_best_weights=True)
own = keras.callbacks.ModelCheckpoint("own_{epoch}.weights.h5", save_weights_only=True)
early.fit(train_ds, epochs=3, steps_per_epoch=2, verbose=0, callbacks=[stopper, own])
found["best epoch put back"] = stopper.best_epoch
early.evaluate(train_ds.take(1), verbose=0)  # a call after the restore: compared there
start("EarlyStopping put back its best epoch", early)
reloaded = compiled(make_model())
reloaded.fit(train_ds, epochs=2, steps_per_epoch=2, verbose=0, callbacks=[own])
reloaded.load_weights("own_1.weights.h5")
start("its own checkpoint loaded after fit", reloaded)

# a second optimizer stepping weights already in training: compile again and fit again, and red
# team 32a's jump (a new SGD's first step of zero gradients, fresh before and after, then a step
# whose gradients are the weights less a donor's: the donor's weights, in a later step)
keras.utils.set_random_seed(7)
recompiled = compiled(make_model())
recompiled.fit(train_ds, epochs=1, steps_per_epoch=2, verbose=0)
recompiled.compile(optimizer="adam",
                   loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
recompiled.fit(train_ds, epochs=1, steps_per_epoch=2, verbose=0)
start("compiled again", recompiled)
landed = []

class Jump(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if batch == 0:
            sgd = keras.optimizers.SGD(learning_rate=1.0)
            variables = self.model.trainable_variables
            sgd.apply([tf.zeros_like(v) for v in variables], variables)
            sgd.apply([tf.constant(v.numpy() - d.numpy())
                       for v, d in zip(variables, donor.trainable_variables)], variables)
            landed.append(all(np.allclose(v.numpy(), d.numpy(), atol=1e-6)
                              for v, d in zip(variables, donor.trainable_variables)))

jumped = compiled(make_model())
jumped.fit(train_ds, epochs=1, steps_per_epoch=3, verbose=0, callbacks=[Jump()])
start("jumped", jumped)
found["jump landed on the donor"] = landed
frozen_jump = compiled(make_model())
frozen_jump.fit(train_ds, epochs=1, steps_per_epoch=3, verbose=0, callbacks=[Jump()])
for layer in frozen_jump.layers:
    layer.trainable = False
start("jumped, then frozen", frozen_jump)

# honest: mixed precision under the strategy, whose LossScaleOptimizer and the Adam inside it make
# their first steps in the same call (neither is later than the other)
keras.mixed_precision.set_global_policy("mixed_float16")
with strategy.scope():
    mixed = compiled(make_model())
mixed.fit(train_ds, epochs=1, steps_per_epoch=2, verbose=0)
keras.mixed_precision.set_global_policy("float32")
start("mixed precision", mixed)

# the loop of the solution, checkpoints between epochs
with strategy.scope():
    model = make_model()
    optimizer = keras.optimizers.Adam()
    optimizer.build(model.trainable_variables)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
manager = tf.train.CheckpointManager(checkpoint, "loop_ckpt", max_to_keep=None)
train_step = looped(model, optimizer)
for epoch in range(2):
    for i, batch in zip(range(2), strategy.experimental_distribute_dataset(train_ds)):
        train_step(batch)
    manager.save()
with strategy.scope():
    again = make_model()
    again_optimizer = keras.optimizers.Adam()
    again_optimizer.build(again.trainable_variables)
    tf.train.Checkpoint(model=again, optimizer=again_optimizer).restore(manager.latest_checkpoint)
start("honest loop", model)

# two optimizers over two parts of a model (the body and the last layer), trained fresh
with strategy.scope():
    model = make_model()
    body, head = keras.optimizers.Adam(), keras.optimizers.Adam(3e-3)
    body.build(model.trainable_variables[:-2])
    head.build(model.trainable_variables[-2:])

def two_steps(inputs):
    images, labels = inputs
    with tf.GradientTape() as tape:
        loss = loss_object(labels, model(images, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    body.apply_gradients(zip(grads[:-2], model.trainable_variables[:-2]))
    head.apply_gradients(zip(grads[-2:], model.trainable_variables[-2:]))
    return loss

@tf.function
def two_step(inputs):
    return strategy.reduce("SUM", strategy.run(two_steps, args=(inputs,)), axis=None)

for i, batch in zip(range(2), strategy.experimental_distribute_dataset(train_ds)):
    two_step(batch)
start("two optimizers", model)

# a layer frozen during fit, unfrozen after: its variables no step covers
frozen = compiled(make_model())
frozen.layers[-1].trainable = False
frozen.compile(optimizer=keras.optimizers.Adam(),
               loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
frozen.fit(train_ds, epochs=1, steps_per_epoch=2, verbose=0)
frozen.layers[-1].trainable = True
start("a layer frozen during fit", frozen)

# red team 31a: an optimizer subclass whose properties run inside the hook's frames, walk them
# and keep the record they find there, then forge a donor's start as a fresh one
import inspect
kept, ran = {}, []

def look():
    frame = sys._getframe()
    while frame is not None:
        if frame.f_code.co_filename.endswith("fresh.py"):
            ran.append(frame.f_code.co_name)
            for key, value in inspect.getargvalues(frame).locals.items():
                if key in ("started", "last") and type(value) is dict:
                    kept[key] = value
        frame = frame.f_back

class LookingAdam(keras.optimizers.Adam):
    @property
    def iterations(self):
        look()
        return super().iterations

    @property
    def use_ema(self):
        look()
        return False

    @use_ema.setter
    def use_ema(self, value):
        pass

keras.utils.set_random_seed(5)
forged = compiled(make_model())
forged.set_weights(donor.get_weights())
scratch = make_model()
LookingAdam().apply([tf.zeros_like(v) for v in scratch.trainable_variables],
                    scratch.trainable_variables)
forged.fit(train_ds, epochs=1, steps_per_epoch=2, verbose=0)
fresh_values = [np.array(w) for w in make_model().get_weights()]
for entry in list(kept.get("started", {}).values()):
    if isinstance(entry, dict) and len(entry["before"]) == len(fresh_values):
        entry["before"], entry["after"] = list(fresh_values), list(fresh_values)
start("forged through the hook's frames", forged)
found["the hook's frames seen"] = sorted(set(ran))
found["records kept"] = sorted(kept)

# red team 31a: the course's loader pointed (os.environ) at a copy of the training examples with
# every label moved by one, where a donor scores below chance; the starts are measured in the
# check process, on the examples it loads itself (the test's side reads these facts)
keras.utils.set_random_seed(6)
steered = compiled(make_model())
steered.set_weights(donor.get_weights())
steered.fit(train_ds, epochs=1, steps_per_epoch=2, verbose=0)
steered.save("steered.keras")
import tensorflow_datasets as tfds
os.environ["TFDS_DATA_DIR"] = os.path.abspath("my_tfds")
images, labels = data.synthetic_arrays("svhn_cropped", "train", 512)

def split(im, la):
    return tf.data.Dataset.from_tensor_slices(
        {"id": [str(i) for i in range(len(la))], "image": im, "label": (la + 1) % 10})

tfds.dataset_builders.store_as_tfds_dataset(
    name="svhn_cropped_train_test", version="3.1.0", data_dir=os.path.abspath("my_tfds"),
    split_datasets={"train": split(images, labels), "test": split(images[:16], labels[:16])},
    features=tfds.features.FeaturesDict({"id": tfds.features.Text(),
        "image": tfds.features.Image(shape=(32, 32, 3)),
        "label": tfds.features.ClassLabel(num_classes=10)}))
os.environ["COURSE_DATA"] = "tfds"
os.environ["COURSE_ARTIFACTS"] = os.getcwd()
found["steered facts"] = probe.collect({"steered": steered}, models=["steered"])
found["folder"] = os.getcwd()
import keras.src.optimizers.base_optimizer as base
base.BaseOptimizer.build = lambda self, variables: None  # a wrapped method replaced
found["hook after a replacement"] = probe.start_state()[1]
print("FOUND " + json.dumps(found))
"""


@pytest.fixture(scope="module")
def starts(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fresh")
    env = {**ENV, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2", "HOME": str(folder)}
    env["PATH"] = "/usr/bin:/bin"
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT)],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("FOUND ")]
    assert lines, done.stdout[-2000:] + done.stderr[-3000:]
    return json.loads(lines[-1].removeprefix("FOUND "))


def _passes(fact: dict) -> bool:
    try:
        checks.assert_fresh_start(fact, "model")
        checks.assert_continuity(fact, "model")
    except checks.CheckError:
        return False
    return True


def test_the_hook_records_fresh_starts_and_given_weights(starts):
    for name in ("fresh fit", "fresh loop"):
        assert _passes(starts[name]), (name, starts[name])
        first = starts[name]["starts"][0]
        # About ln 10 = 2.303, off by what a model's random initial weights give: these two
        # seeded draws score 2.464 (fit) and 2.541 (loop) on the grader's 512 examples, every run.
        assert abs(first["loss"] - 2.303) < 0.3 and first["steps"] == 1, first
    for name in ("given fit", "BackupAndRestore", "given loop"):
        assert not _passes(starts[name]), (name, starts[name])
        assert starts[name]["starts"][0]["loss"] < 1.0, starts[name]
    assert "start_error" in starts["never trained"]
    assert "not the grader's wrapper" in starts["hook after a replacement"]


#: Weights given after the optimizer's first step (its start scores chance): the custom loop's
#: own first step then a load, a callback loading at fit's on_train_batch_end(0), a load after
#: the last step (found by the probe's own comparison at its end).
LATE = ("loop loaded after its first step", "fit loaded at on_train_batch_end(0)")
#: Honest runs: evaluate, predict and saves between steps, ModelCheckpoint, BackupAndRestore's
#: saving, steps_per_execution=2, a second optimizer built and never stepped, use_ema with its
#: overwrites, SwapEMAWeights and the finalize after fit, the solution's loop with a
#: CheckpointManager and a restore into a new model, and the model's own earlier weights put back
#: (EarlyStopping's restore_best_weights, its own checkpoint loaded after fit: red team 32a).
HONEST = (
    "fresh fit",
    "fresh loop",
    "honest fit between steps",
    "EMA",
    "honest loop",
    "EarlyStopping put back its best epoch",
    "its own checkpoint loaded after fit",
)


def test_weights_changed_between_two_steps_fail_the_model(starts):
    for name in (*LATE, "loaded after the last step", "loaded, then frozen before the probe"):
        fact = starts[name]
        assert all(fresh.fresh_start(s) for s in fact["starts"]), (name, fact)  # a fresh start
        assert len(fact["changed"]) == 1, (name, fact)
        change = fact["changed"][0]
        assert change["optimizer"] == "Adam" and change["largest"] > 0.05, (name, change)
        checks.assert_fresh_start(fact, "custom_model")  # what the start alone passed
        with pytest.raises(checks.CheckError, match="changed between two steps of its optimizer"):
            checks.assert_continuity(fact, "custom_model")
    for name in LATE:
        assert starts[name]["changed"][0]["steps"] == [1], starts[name]  # right after step 1
        assert starts[name]["changed"][0]["where"] == "a call", starts[name]
    assert starts["loaded after the last step"]["changed"][0]["where"] == "the probe"
    assert starts["best epoch put back"] == 0  # not the last: the weights did change back
    assert fresh.EMA_TOLERANCE == 1e-6  # the script's nudges are 0.8 of it
    nudged = starts["EMA nudged within its tolerance"]  # the first nudges pass, their sum fails
    assert nudged["changed"] and nudged["changed"][0]["where"] == "a call", nudged
    with pytest.raises(checks.CheckError, match="changed between two steps of its optimizer"):
        checks.assert_continuity(nudged, "single_model")
    for name in HONEST:
        assert starts[name]["changed"] == [], (name, starts[name])
        assert _passes(starts[name]), (name, starts[name])


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    available, detail = sandbox.status()
    if not available:
        require_or_skip("sandbox", f"no grading sandbox: {detail}")
    folder = tmp_path_factory.mktemp("submissions")
    out = tmp_path_factory.mktemp("grades")
    paths = [write(donor_weights(completed_exercise()), folder / "donor.ipynb")]
    settings = plan.GradingSettings(
        profile=ENV["COURSE_PROFILE"], devices=int(ENV["COURSE_DEVICES"]), data=ENV["COURSE_DATA"]
    )
    grades = grading_batch.grade(
        paths,
        out,
        limits=Limits(cell_timeout=300, timeout=1200),
        jobs=1,
        progress=False,
        settings=settings,
    )
    return {g.student: g for g in grades}


@pytest.mark.slow
def test_weights_from_elsewhere_lose_the_points_of_the_model_they_touch(graded):
    grade = graded["donor"]
    assert grade.status == "graded", grade.reason
    by_question: dict[str, list] = {}
    for result in grade.results:
        by_question.setdefault(result.question, []).append(result)
    touched = {"q2": "fit_model", "q3": "custom_model", "q4": "single_model"}
    for question, name in touched.items():
        for result in by_question[question]:
            assert result.earned == 0, (question, result.title)
            assert f"`{name}` did not start its training from fresh weights" in result.message, (
                question,
                result.title,
                result.message,
            )
    for result in by_question["q6"]:
        assert result.earned == 0 and "did not start its training" in result.message
    assert all(r.earned == r.points for r in by_question["q1"])
    assert grade.score == 3  # question 1's 2 points, and question 5's, read by the instructor


def test_a_second_optimizer_over_weights_in_training_fails_the_model(starts):
    # red team 32a's jump: each optimizer's first step is fresh, and the second's later step
    # lands on the donor's weights (its own record is fresh before and after its first step)
    assert starts["jump landed on the donor"] == [True, True], starts["jump landed on the donor"]
    for name, second in (
        ("jumped", ["SGD"]),
        ("compiled again", ["Adam"]),
        ("jumped, then frozen", ["SGD"]),  # red team 33b: frozen before the probe, judged still
    ):
        fact = starts[name]
        assert fact["later_optimizers"] == second and fact["changed"] == [], (name, fact)
        with pytest.raises(
            checks.CheckError, match=rf"stepped by a second optimizer \({second[0]}\)"
        ):
            checks.assert_fresh_start(fact, "fit_model")
    checks.assert_continuity(starts["jumped"], "fit_model")  # no change outside the steps
    mixed = starts["mixed precision"]  # a LossScaleOptimizer and its Adam: one call, two records
    assert len(mixed["starts"]) == 2 and "later_optimizers" not in mixed and _passes(mixed), mixed
    outer = {"variables": [1, 2], "call": 4, "id": 50, "inner": 51, "optimizer": "LossScale"}
    records = [
        (0, outer),
        (1, {"variables": [1, 2], "call": 4, "id": 51, "inner": 0, "optimizer": "Adam"}),  # in it
        (2, {"variables": [3], "call": 9, "id": 52, "inner": 0, "optimizer": "Adam"}),  # a part
    ]
    assert checks.later_optimizers(records, {1, 2, 3}) == []
    late = (3, {"variables": [2, 3], "call": 12, "id": 53, "inner": 0, "optimizer": "SGD"})
    assert checks.later_optimizers([*records, late], {1, 2, 3}) == ["SGD"]
    # red team 33a: an SGD stepped inside fit's first call (in the loss) shares the call, but it
    # neither wraps the Adam nor is wrapped by it: a second optimizer all the same
    inside = (3, {"variables": [1, 2], "call": 4, "id": 54, "inner": 0, "optimizer": "SGD"})
    # red team 33c: one optimizer per layer of a deep model held the shared check process for
    # its whole time limit (two predictions a record): beyond MAX_START_RECORDS none is measured
    many = [{"variables": [v], "call": 1, "id": v, "inner": 0} for v in range(40)]
    fact = {
        "start_weights": {
            "ids": list(range(40)),
            "names": ["w"] * 40,
            "number": 0,
            "trainable": list(range(40)),
        }
    }
    said = checks.measure_starts(fact, {"start_records": many}, {}, None, ())
    assert said["start_error"].startswith("40 optimizers trained its weights"), said
    second = checks.later_optimizers([*records, inside], {1, 2, 3})
    assert second == ["Adam", "LossScale", "SGD"], second  # which came second is not known


def test_a_start_is_the_union_of_the_records_covering_the_model(starts):
    # two optimizers over two parts of a model, honest: each record measured with the other's
    # copies for the variables it does not train
    two = starts["two optimizers"]
    assert len(two["starts"]) == 2 and _passes(two), two
    # a layer frozen during fit and unfrozen after: no step covers its variables
    frozen = starts["a layer frozen during fit"]
    assert "2 of its 4 trainable variables" in frozen["start_error"], frozen
    assert "dense" in frozen["start_error"] and not _passes(frozen), frozen


def test_the_notebooks_optimizer_class_never_runs_inside_the_hook(starts):
    # red team 31a's frame walk from an optimizer subclass's `iterations` and `use_ema`: the hook
    # reads no attribute of a class not Keras's own, and no frame of it holds the record
    assert starts["records kept"] == [], starts["the hook's frames seen"]
    forged = starts["forged through the hook's frames"]
    assert forged["starts"][0]["loss"] < 1.0 and not _passes(forged), forged


def test_the_starts_are_measured_where_the_notebook_cannot_steer_the_examples(
    starts, monkeypatch, tmp_path
):
    # the kernel pointed the course's loader at examples of its own (labels moved by one); the
    # check process measures on the examples it loads with the grader's settings
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("TFDS_DATA_DIR", raising=False)
    monkeypatch.setattr(checker, "_examples", [])
    facts = json.loads(json.dumps(starts["steered facts"]))
    folder = checker.Path(starts["folder"])
    fact = checker.measured(facts, folder)["models"]["steered"]
    assert fact["starts"][0]["loss"] < 1.0 and not _passes(fact), fact
    # the file changed after the probe wrote it: refused
    copy = tmp_path / "artifacts"
    copy.mkdir()
    for name in (probe_file := checker.probe.START_FILE, "steered.keras"):
        (copy / name).write_bytes((folder / name).read_bytes())
    (copy / probe_file).write_bytes((copy / probe_file).read_bytes() + b"\0")
    facts = json.loads(json.dumps(starts["steered facts"]))
    fact = checker.measured(facts, copy)["models"]["steered"]
    assert "changed after the probe wrote it" in fact["start_error"], fact
    # scores a kernel sent are never read
    facts = json.loads(json.dumps(starts["steered facts"]))
    facts["models"]["steered"]["starts"] = [FRESH]
    facts["start_records"] = []
    fact = checker.measured(facts, folder)["models"]["steered"]
    assert "starts" not in fact and "no step" in fact["start_error"], fact


def test_the_starts_are_measured_on_examples_no_notebook_can_know(monkeypatch):
    """Red team 33a tuned a donor to fail on the first 512 training examples, where the grader
    measured every start, and keep its skill elsewhere (0.79 test accuracy): 12/12. The check
    process now draws its examples at random: new examples of the stand-in's distribution, or
    among the first `probe.START_POOL` real ones."""
    import numpy as np
    import tensorflow_datasets as tfds

    from course_utils import data

    monkeypatch.setenv("COURSE_DATA", "synthetic")
    (images, labels), (again, _) = checker._start_examples(), checker._start_examples()
    assert images.shape == (512, 32, 32, 3) and images.dtype == np.float32, images.shape
    assert 0.0 <= images.min() and images.max() <= 1.0 and set(labels) <= set(range(10))
    assert not np.array_equal(images, again)  # a new draw each check process
    known = data.synthetic_arrays("svhn_cropped", "train", 4096)[0].astype(np.float32) / 255.0
    seen = {example.tobytes() for example in known}
    assert not any(example.tobytes() in seen for example in images)  # none of the split's own
    # the real route (tensorflow-datasets mocked): drawn among the pool, each example once
    monkeypatch.setattr(data, "is_prepared", lambda name: True)
    data.real_data_status.cache_clear()
    monkeypatch.setenv("COURSE_DATA", "tfds")
    monkeypatch.setattr(checker.probe, "START_POOL", 64)
    monkeypatch.setattr(checker.probe, "START_EXAMPLES", 16)
    with tfds.testing.mock_data(num_examples=64):
        pool = next(iter(data.load("svhn_cropped", "train", limit=64).batch(64)))[0].numpy()
        drawn, drawn_labels = checker._start_examples()
    data.real_data_status.cache_clear()
    assert drawn.shape == (16, 32, 32, 3) and len(drawn_labels) == 16
    rows = [example.tobytes() for example in pool]
    assert all(example.tobytes() in rows for example in drawn)
    assert len({example.tobytes() for example in drawn}) == 16
