"""The grader's reading and the probe's tie to `fit` on red team 22a's routes, and the honest
lines beside them: weights and optimizer state loaded into a model graded as trained by `fit`,
statements hidden in `x = %time ...`, module attributes assigned, history magics, containers
filled by other spellings, distributed iterators stepped by hand, and bindings that may not run.

Run: pytest tests/test_grading_reading2.py  (a few seconds; one test trains a tiny model).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_grading_reading import _cell_of, _solution, _trained_fit_model

from course_tools.grade.core import checks, reading

LOOP = "train_dist = strategy.experimental_distribute_dataset(train_ds)"

ANCHOR = 'fit_model.save(ARTIFACTS / "fit_model.keras")'

#: The line of the solution's fit cell just before fit_model's fit runs.
BEFORE_FIT = "fit_clock = EpochClock()"


def test_weights_and_optimizer_state_loaded_into_fit_model_cost_what_a_copy_costs(tmp_path):
    """Red team 22a's lw-onedev, ckpt-model and ckpt-manager (12/12): Keras 3 saves a compiled
    model's optimizer with its weights, so `load_weights`, a `tf.train.Checkpoint` given the
    model (or its optimizer, through a dict too) then read, and a `CheckpointManager` restoring
    one bring the step count and Adam's moments with the weights. Each fails `own_model` and the
    scope point, naming the cell (a checkpoint that reaches the optimizer is read as its
    steps, red team 21a's rule, first). The load is placed before fit_model's fit, so fit runs
    on the copied weights. The solution's restore into `restored_fit` does not count."""
    found = _trained_fit_model(tmp_path)
    for forged in (
        'fit_model.load_weights(ARTIFACTS / "one.weights.h5")',
        'fit_model.load_weights("/tmp/onedev.keras")',
        'keras.saving.load_weights(fit_model, "/tmp/one.weights.h5")',
        "fit_model.load_own_variables(store)",
        "fit_model.set_weights(one_device.get_weights())",
        "fit_model.set_state_tree(tree)",
        'tf.train.Checkpoint(model=fit_model).read("/tmp/onedev/ckpt")',
        "kept = tf.train.Checkpoint(model=fit_model)\nkept.restore(path)",
        "tf.train.CheckpointManager(tf.train.Checkpoint(optimizer=fit_model.optimizer, "
        'model=fit_model), "/tmp/onedev", 1).restore_or_initialize()',
        "c = tf.train.Checkpoint(model=fit_model)\nm = tf.train.CheckpointManager(c, d, 1)\n"
        "m.restore_or_initialize()",
        "_c = dict(optimizer=fit_model.optimizer, model=fit_model)\n"
        "tf.train.Checkpoint(**_c).read(path)",
    ):
        code = _solution({BEFORE_FIT: f"{forged}\n{BEFORE_FIT}"})
        cell = _cell_of(code, ANCHOR)
        with pytest.raises(
            checks.CheckError,
            match=rf"(loads weights into `fit_model` from elsewhere|steps the optimizer "
            rf"of `fit_model` outside fit) \(cell \[{cell}\]: ",
        ):
            checks.own_model(tmp_path, "fit_model", found, code)
        with pytest.raises(
            checks.CheckError,
            match=rf"with (weights loaded into it from elsewhere|steps of its optimizer "
            rf"outside fit) \(cell \[{cell}\]: ",
        ):
            checks.assert_created_in_scope(code, "fit_model")
        checks.clear_cache()
    solution = _solution()
    assert reading.Code.of(solution).hand_steps("fit_model", loads=True) == []
    checks.own_model(tmp_path, "fit_model", found, solution)
    checks.assert_created_in_scope(solution, "fit_model")


def _copied_fit_model(tmp_path: Path, how: str) -> dict:
    """A fit_model that never ran `fit`, saved as fit_model.keras in `tmp_path`: another model
    trained 8 steps, its weights copied in (`how`: set_weights or load_weights); the probe's
    facts of it."""
    import keras
    import numpy as np

    from course_tools.grade.core import probe

    def made() -> keras.Model:
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
        model.compile(optimizer=keras.optimizers.Adam(), loss="mse")
        return model

    trained = made()
    rng = np.random.default_rng(0)
    trained.fit(rng.random((32, 4)), rng.random((32, 3)), batch_size=8, epochs=2, verbose=0)
    copy = made()
    copy.optimizer.build(copy.trainable_variables)
    if how == "set_weights":
        copy.set_weights(trained.get_weights())
    else:
        trained.save_weights(tmp_path / "one.weights.h5")
        copy.load_weights(tmp_path / "one.weights.h5")
    copy.save(tmp_path / "fit_model.keras")
    checks.clear_cache()
    return probe.collect({"fit_model": copy}, models=["fit_model"])


def test_a_fit_model_that_never_ran_fit_is_not_the_model_trained_however_its_weights_came(
    tmp_path,
):
    """The tie to `fit` itself, a run-time fact: every fit sets its `History` on the model
    (`model.history`), listing each epoch it ends. A model graded as trained by `fit` whose
    kernel object never ran an epoch of fit fails `own_model`, whether its weights came by
    `set_weights` (0 steps, file and kernel agreeing) or by `load_weights` (the other model's 8
    steps and moments brought along), with code the reading finds nothing in. A model that ran
    fit passes."""
    for how, steps in (("set_weights", 0), ("load_weights", 8)):
        found = _copied_fit_model(tmp_path, how)
        fact = found["models"]["fit_model"]
        assert (fact["fit_epochs"], fact["optimizer_steps"]) == ([0, None], steps), (how, fact)
        with pytest.raises(
            checks.CheckError,
            match="`fit_model` in the notebook's memory never ran an epoch of fit from epoch 0",
        ):
            checks.own_model(tmp_path, "fit_model", found, _solution())
        checks.clear_cache()
    found = _trained_fit_model(tmp_path)
    assert found["models"]["fit_model"]["fit_epochs"] == [2, 2]
    checks.own_model(tmp_path, "fit_model", found, _solution())


def test_a_statement_timed_in_an_assignment_is_read_as_that_statement():
    """Red team 22a's time-assign (12/12): `_ = %time train_ds = ...` ran the assignment in the
    kernel's namespace, but the reading took the magic's value only when its text was an
    expression. The statement is read in its place, as a `%time` line is: the unshuffled
    pipeline fails question 1 like the plain assignment. Timing the training call and keeping
    its value stays readable and passes."""
    unshuffled = "train_ds = train_cached.batch(GLOBAL_BATCH)"
    for line in (
        f"_ = %time {unshuffled}",
        f"timed = %time {unshuffled}",
        f"x = %timeit -n1 -r1 -o {unshuffled}",
    ):
        code = _solution({"fit_clock = EpochClock()": f"{line}\nfit_clock = EpochClock()"})
        with pytest.raises(checks.CheckError, match="does not shuffle `train_ds`"):
            checks.assert_pipeline_code(code, "train_ds", "train")
        checks.clear_cache()
    honest = _solution(
        {"fit_clock = EpochClock()": "seen = %time len(train_ds)\nfit_clock = EpochClock()"}
    )
    checks.assert_readable(honest)
    checks.assert_pipeline_code(honest, "train_ds", "train")


def test_an_attribute_set_on_a_module_makes_the_reading_unreadable_naming_the_cell():
    """Red team 22a's inspect-main and tqdm-assign (12/12): `inspect.getmodule(f)` is the
    notebook's `__main__`, so an attribute set on it binds a notebook name past the reading;
    `tqdm.auto.tqdm` or `itertools.islice` replaced makes the wrappers the reading looks through
    iterate anything. Setting or deleting an attribute of a module (imported, or reached
    through a call, or a name bound to `inspect.getmodule(...)`) makes every point the reading
    decides unreadable, naming the cell. A literal set on a module (`tqdm.monitor_interval = 0`)
    and attributes of the notebook's own objects are not."""
    batches = "train_cached.batch(GLOBAL_BATCH)"
    for lines in (
        f"import inspect\ninspect.getmodule(make_model).train_ds = {batches}",
        f"import inspect\nm = inspect.getmodule(make_model)\nm.train_ds = {batches}",
        f"import inspect\nsetattr(inspect.getmodule(make_model), 'train_ds', {batches})",
        f"import tqdm.auto\ntqdm.auto.tqdm = lambda data, **kw: iter({batches})",
        "from tqdm import auto\nauto.tqdm = lambda data, **kw: iter(data)",
        f"import itertools\nitertools.islice = lambda data, stop: iter({batches})",
        "import importlib\nimportlib.import_module('itertools').islice = print",
        "import itertools as it\ndel it.islice",
    ):
        code = _solution(added=(lines,))
        cell = _cell_of(code, lines)
        with pytest.raises(
            checks.CheckError,
            match=rf"cannot read what a module's names stand for .*\(cell \[{cell}\]: ",
        ):
            checks.assert_pipeline_code(code, "train_ds", "train")
        checks.clear_cache()
    for lines in (
        "from tqdm.auto import tqdm\ntqdm.monitor_interval = 0",
        "clock = EpochClock()\nclock.note = train_ds",
        "import numpy as np\nnp.set_printoptions(precision=3)",
    ):
        code = _solution(added=(lines,))
        assert [u for u in reading.Code.of(code).unreadable() if u[2] == "module"] == [], lines
        checks.clear_cache()


def test_magics_that_run_earlier_input_or_stored_code_make_the_reading_unreadable():
    """Red team 22a's rerun (12/12 on Slurm): `%rerun 9` ran an earlier cell (an unshuffled
    `train_ds`) after the one the reading takes as the binding in force. IPython's magics that
    run or bring back earlier input or stored code (`%rerun`, `%recall`, `%macro`, `%store -r`,
    `%load`, `%paste`, `%save`) make the reading's points unreadable, naming the cell; `%store x`
    only keeps a value, and `%run` of a file was refused already (the shell's magics)."""
    for line in (
        "%rerun 9",
        "%recall 9",
        "%macro again 9",
        "%store -r train_ds",
        "%load helpers.py",
        "%paste",
        "%save -f helpers.py 9",
    ):
        code = _solution(added=(line,))
        cell = _cell_of(code, line)
        with pytest.raises(checks.CheckError, match=rf"magic runs again .*\(cell \[{cell}\]: "):
            checks.assert_pipeline_code(code, "train_ds", "train")
        checks.clear_cache()
    assert [u for u in reading.Code.of(_solution(added=("%store NUM_TRAIN",))).unreadable()] == []


#: TensorFlow's "iterate inside a tf.function" loop over a distributed iterator and a step count.
TRAIN_STEPS = (
    "\n\n@tf.function\ndef train_steps(iterator, steps):\n    total = 0.0\n"
    "    for _ in tf.range(steps):\n        total += strategy.reduce(tf.distribute.ReduceOp.SUM, "
    "strategy.run(train_step, args=(next(iterator),)), axis=None)\n    return total\n"
)


def test_tensorflows_own_ways_to_step_a_distributed_iterator_keep_question_1():
    """Red team 22a's honest-getnext, honest-optional and honest-tfsteps2 (11/12, 'not
    distributed'): a distributed iterator's `get_next()`, `get_next_as_optional()` and its
    `get_value()` are read through as `next(...)` is, and a step count (an int or a tensor of
    one, from `NUM_TRAIN` or `len(...)`) given to a tf.function loop is a number, not examples.
    The same methods on an iterator of the undistributed pipeline still fail question 1."""
    loop = (
        "        for batch in train_dist:\n"
        "            total_loss += distributed_train_step(batch)\n            batches += 1"
    )
    for honest in (
        "        iterator = iter(train_dist)\n        for _ in range(len(train_ds)):\n"
        "            total_loss += distributed_train_step(iterator.get_next())\n"
        "            batches += 1",
        "        iterator = iter(train_dist)\n        while True:\n"
        "            optional = iterator.get_next_as_optional()\n"
        "            if not optional.has_value():\n                break\n"
        "            total_loss += distributed_train_step(optional.get_value())",
        "        steps = -(-NUM_TRAIN // GLOBAL_BATCH)\n"
        "        total_loss = train_steps(iter(train_dist), tf.constant(steps))\n"
        "        batches = steps",
    ):
        code = _solution({loop: honest, LOOP: f"{LOOP}\n{TRAIN_STEPS}"})
        checks.assert_pipeline_code(code, "train_ds", "train")
        checks.clear_cache()
    forged = (
        "        iterator = iter(train_cached.batch(GLOBAL_BATCH))\n"
        "        for _ in range(len(train_ds)):\n"
        "            total_loss += distributed_train_step(iterator.get_next())"
    )
    code = _solution({loop: forged})
    with pytest.raises(checks.CheckError, match="not distributed"):
        checks.assert_pipeline_code(code, "train_ds", "train")


def test_a_container_filled_by_any_spelling_is_made_from_what_is_put_in_it():
    """Red team 22a's listappend and holder-append (12/12): a fill was read only as
    `name.append(...)` on a bare name. A fill through the type's method (`list.append(L, b)`),
    through an item or attribute of the container (`held["batches"].append(b)`), by
    `__iadd__`, a deque's `appendleft` or `heapq.heappush` counts under the container's root
    name: the loop over it fails question 1 as 'not distributed'."""
    loop = "for batch in train_dist:"
    source = "for b in train_cached.batch(GLOBAL_BATCH):\n"
    for fill, fed in [
        (f"kept = []\n{source}    list.append(kept, b)\n", "for batch in kept:"),
        (f"held = {{'b': []}}\n{source}    held['b'].append(b)\n", "for batch in held['b']:"),
        (f"kept = []\n{source}    kept.__iadd__([b])\n", "for batch in kept:"),
        (
            f"import collections\nkept = collections.deque()\n{source}    kept.appendleft(b)\n",
            "for batch in kept:",
        ),
        (
            f"import heapq\nkept = []\n{source}    heapq.heappush(kept, (0, b))\n",
            "for _, batch in kept:",
        ),
        (
            f"import types\nns = types.SimpleNamespace(b=[])\n{source}    ns.b.append(b)\n",
            "for batch in ns.b:",
        ),
    ]:
        code = _solution({LOOP: f"{LOOP}\n{fill}", loop: fed})
        cell = _cell_of(code, fed)
        with pytest.raises(checks.CheckError, match=rf"not distributed.*cell \[{cell}\]"):
            checks.assert_pipeline_code(code, "train_ds", "train")
        checks.clear_cache()


def test_a_binding_that_may_not_run_does_not_end_the_hold_on_compiles_optimizer(tmp_path):
    """Red team 22a's suppress-rebind (12/12): `with contextlib.suppress(...): opt = 1 / 0`
    never bound `opt`, yet the reading took it as bound again, so the learning-rate-0 steps of
    the optimizer given to compile were not counted. Only a `with` of a context manager that
    lets every exception through (a strategy's scope, a timer) keeps its assignments sure;
    the custom loop's own `optimizer = Adam()` in the scope is still its own."""
    scope = "with strategy.scope():\n    fit_model"
    code = _solution(
        {
            "optimizer=keras.optimizers.Adam(),\n        loss=keras.losses.SparseCategorical": (
                "optimizer=opt,\n        loss=keras.losses.SparseCategorical"
            ),
            scope: "with strategy.scope():\n    opt = keras.optimizers.Adam()\n    fit_model",
            ANCHOR: "import contextlib\n\nwith contextlib.suppress(ZeroDivisionError):\n"
            "    opt = 1 / 0\nopt.learning_rate.assign(0.0)\n" + ANCHOR,
        }
    )
    cell = _cell_of(code, ANCHOR)
    with pytest.raises(
        checks.CheckError, match=rf"steps of its optimizer outside fit \(cell \[{cell}\]"
    ):
        checks.assert_created_in_scope(code, "fit_model")
    checks.clear_cache()
    checks.assert_created_in_scope(_solution(), "fit_model")
    assert reading.Code.of(_solution()).hand_steps("fit_model") == []


def _fit_then(tmp_path: Path, then) -> dict:  # noqa: ANN001 - a function of the model
    """The probe's facts of a small model loaded with another's 8 steps, then `then(model)`,
    saved as fit_model.keras in `tmp_path`."""
    import keras
    import numpy as np

    from course_tools.grade.core import probe

    def made() -> keras.Model:
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
        model.compile(optimizer=keras.optimizers.Adam(), loss="mse")
        return model

    rng = np.random.default_rng(0)
    data = (rng.random((32, 4)), rng.random((32, 3)))
    other = made()
    other.fit(*data, batch_size=8, epochs=2, verbose=0)
    other.save_weights(tmp_path / "one.weights.h5")
    model = made()
    then(model, data, tmp_path / "one.weights.h5")
    model.save(tmp_path / "fit_model.keras")
    checks.clear_cache()
    return probe.collect({"fit_model": model}, models=["fit_model"])


def test_the_tie_to_fit_counts_the_epochs_fit_ran_not_that_it_was_entered(tmp_path):
    """Red team 23a's unbound-init (12/12): weights loaded, then `fit(epochs=2,
    initial_epoch=2)` builds Keras's training function and runs no epoch; with `epochs=0` the
    same. Each fails `own_model`: fit's History lists no epoch from epoch 0. Red team 23a's
    honest-recompile (8/12, "never ran fit"): compile again after fit, with the same optimizer,
    to evaluate with other metrics; `compile` resets the training function but not the
    History, so it passes."""
    zero = (
        lambda m, d, p: (m.load_weights(p), m.fit(*d, batch_size=8, epochs=2, initial_epoch=2)),
        lambda m, d, p: (m.load_weights(p), m.fit(*d, batch_size=8, epochs=0)),
    )
    for then in zero:
        found = _fit_then(tmp_path, then)
        assert found["models"]["fit_model"]["fit_epochs"][0] == 0
        with pytest.raises(checks.CheckError, match="never ran an epoch of fit from epoch 0"):
            checks.own_model(tmp_path, "fit_model", found, _solution())
        checks.clear_cache()

    def recompiled(model, data, _) -> None:  # noqa: ANN001
        model.fit(*data, batch_size=8, epochs=2, verbose=0)
        model.compile(optimizer=model.optimizer, loss="mse", metrics=["mae"])
        model.evaluate(*data, verbose=0)

    found = _fit_then(tmp_path, recompiled)
    assert found["models"]["fit_model"]["fit_epochs"] == [2, 2]
    checks.own_model(tmp_path, "fit_model", found, _solution())


def test_a_load_into_a_fit_model_counts_by_its_loaders_name_before_or_after_its_fit(tmp_path):
    """Red team 23a's unbound-init, type-init, ks-alias and ckpt-attr (12/12): the loader named
    by its class, by `type(...)`, imported under another name, and a checkpoint given the model
    as an attribute. Before fit_model's fit (fit runs on another's weights) each fails
    `own_model` and the scope point, naming the cell. Red team 23a's honest-q6-into-fit and
    honest-best: fit_model restoring a checkpoint into itself, before or after its fit, counts
    as well (red team 25a: a fit before a load in the text may never run); the exercise
    restores into a new model."""
    found = _trained_fit_model(tmp_path)
    for forged in (
        "keras.Model.load_weights(fit_model, path)",
        "type(fit_model).load_weights(fit_model, path)",
        "from keras.saving import load_weights as _lw\n_lw(fit_model, path)",
        "_c = tf.train.Checkpoint()\n_c.model = fit_model\n_c.read(path)",
        "_c = tf.train.Checkpoint()\nsetattr(_c, 'model', fit_model)\n_c.restore(path)",
    ):
        code = _solution({BEFORE_FIT: f"{forged}\n{BEFORE_FIT}"})
        cell = _cell_of(code, ANCHOR)
        with pytest.raises(
            checks.CheckError,
            match=rf"loads weights into `fit_model` from elsewhere \(cell \[{cell}\]",
        ):
            checks.own_model(tmp_path, "fit_model", found, code)
        with pytest.raises(checks.CheckError, match=r"weights loaded into it from elsewhere"):
            checks.assert_created_in_scope(code, "fit_model")
        checks.clear_cache()
    for restored in (
        {ANCHOR: f'fit_model.load_weights("/tmp/best_fit.weights.h5")\n{ANCHOR}'},
        {ANCHOR: f"{ANCHOR}\nfit_model.load_weights(latest_fit)"},
    ):
        code = _solution(restored)
        assert reading.Code.of(code).hand_steps("fit_model", loads=True)
        with pytest.raises(checks.CheckError, match="loads weights into `fit_model`"):
            checks.own_model(tmp_path, "fit_model", found, code)
        checks.clear_cache()


def test_setting_what_a_graded_model_or_its_history_holds_makes_the_reading_unreadable():
    """The History the probe reads could be forged by a plain assignment: any set or delete of
    an attribute of a graded model (or an alias of one), and any change to a History's `epoch`
    or `params`, makes every point the reading decides unreadable, naming the cell. Reading a
    History (`h.history["loss"]`, `h.params.get("epochs")`) and a class's own `self.epoch` stay
    readable."""
    for forged in (
        "fit_model.history = one_device.history",
        "_m = fit_model\n_m.history = _h",
        "setattr(fit_model, 'history', _h)",
        "fit_model.history.epoch[:] = [0, 1, 2]",
        "_h = fit_model.fit(train_ds, epochs=EPOCHS, initial_epoch=EPOCHS)\n"
        "_h.epoch.extend([0, 1])",
        "import operator\noperator.setitem(_h.epoch, slice(None), [0, 1, 2])",
        "_h.params['epochs'] = 0",
    ):
        code = _solution({ANCHOR: f"{ANCHOR}\n{forged}"})
        cell = _cell_of(code, ANCHOR)
        with pytest.raises(
            checks.CheckError,
            match=rf"what a model \(or its fit's History\) holds \(cell \[{cell}\]",
        ):
            checks.assert_readable(code)
        checks.clear_cache()
    honest = (
        "_h = fit_model.history\nprint(_h.history['loss'], _h.params.get('epochs'), _h.epoch)\n"
        "class Stop(keras.callbacks.Callback):\n    def __init__(self, epoch):\n"
        "        self.epoch = epoch"
    )
    checks.assert_readable(_solution({ANCHOR: f"{ANCHOR}\n{honest}"}))


def test_line_magics_are_read_only_from_a_short_list_and_their_statements_when_parsed():
    """Red team 23a's prun-stmt, prun-assign (`%prun -q <statement>`) and time-nre (`%time
    --no-raise-error <statement>`): 12/12 with `train_ds` rebound to an unshuffled pipeline
    around the training. Line magics are read only from a short list: `%prun` (any line magic
    off it) makes the reading unreadable, naming the cell; `%time`'s own option is taken off and
    its statement read (q1 fails as for the plain assignment); a `%time` or `%timeit` whose
    options cannot be told from its statement is unreadable. `%load_ext tensorboard`,
    `%tensorboard` and a plain `%time` or `%timeit` stay readable."""
    hidden = "train_ds = train_cached.batch(GLOBAL_BATCH)"
    for line in (
        f"%prun -q {hidden}",
        f"_ = %prun -q -r {hidden}",
        f"%time --no-raise-error {hidden} --no-r",
        f"%time --help {hidden}",
        f"%timeit -- {hidden}",
        f"_ = %timeit -n1 -r1 --x {hidden}",
        "%load_ext hidden_module",
        "%autocall 2",
        "%config InlineBackend.figure_format = (train_ds := train_cached)",
    ):
        code = _solution({ANCHOR: f"{ANCHOR}\n{line}"})
        cell = _cell_of(code, ANCHOR)
        with pytest.raises(
            checks.CheckError, match=rf"the Python a line magic runs \(cell \[{cell}\]: "
        ):
            checks.assert_readable(code)
        checks.clear_cache()
    for line in (f"%time --no-raise-error {hidden}", f"_ = %time --no-raise-error {hidden}"):
        code = _solution({ANCHOR: f"{ANCHOR}\n{line}"})
        checks.assert_readable(code)
        with pytest.raises(checks.CheckError, match="does not shuffle `train_ds`"):
            checks.assert_pipeline_code(code, "train_ds", "train")
        checks.clear_cache()
    honest = (
        "%load_ext tensorboard\n%tensorboard --logdir logs\n%time scores = 1 + 1\n"
        "%config InlineBackend.figure_format = 'retina'\n%matplotlib inline\n"
        "%load_ext autoreload\n%autoreload 2\n"
        "%timeit -n1 -r1 total = sum(range(3))\n_ = %time --no-raise-error print(scores)"
    )
    code = _solution({ANCHOR: f"{ANCHOR}\n{honest}"})
    checks.assert_readable(code)
    checks.assert_pipeline_code(code, "train_ds", "train")


def test_a_fit_of_one_batch_an_epoch_then_a_late_load_is_not_the_model_trained(
    tmp_path, monkeypatch
):
    """Red team 24a's late-spe and late-ckpt (12/12 locally and on Slurm): fit_model's fit runs
    every epoch from 0 but one batch each (`steps_per_epoch=1`), then weights trained without a
    strategy are loaded after it (the load-after-fit exemption; the file's 48 steps and moments
    brought along, so every count matched). Keras's History of that fit says 1 step an epoch,
    not the training set's batches: own_model fails it. A fit over every batch passes."""
    from course_tools.grade.core import probe

    monkeypatch.setattr(checks, "_labels", lambda split: {"count": 32})  # 4 batches of 8

    def late(model, data, path) -> None:  # noqa: ANN001
        model.fit(*data, batch_size=8, epochs=2, steps_per_epoch=1, verbose=0)
        model.load_weights(path)

    found = _fit_then(tmp_path, late)
    fact = found["models"]["fit_model"]
    assert (fact["fit_epochs"], fact["fit_steps"]) == ([2, 2], 1)
    found["global_batch"] = 8
    with pytest.raises(checks.CheckError, match="last fit ran 1 step an epoch"):
        checks.own_model(tmp_path, "fit_model", found, _solution())
    checks.clear_cache()
    found = _fit_then(tmp_path, lambda m, d, _: m.fit(*d, batch_size=8, epochs=2, verbose=0))
    assert found["models"]["fit_model"]["fit_steps"] == 4
    found["global_batch"] = 8
    checks.own_model(tmp_path, "fit_model", found, _solution())
    assert probe.fit_steps(object()) is None  # no Keras History: nothing read
