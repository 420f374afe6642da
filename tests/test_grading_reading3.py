"""The grader's tie of a fit-graded model to its own fit on red team 25a's routes, and the honest
lines beside them: weights loaded into the model after its fit (behind a fit in dead code),
epochs a callback cuts short while Keras's History lists them all, History's own writers called
by the notebook, a loader bound to another name; and four honest lines the reading refused
(`%config InteractiveShell.ast_node_interactivity`, a namespace's `.history`, a logger's level).

Run: pytest tests/test_grading_reading3.py  (a few seconds; one test trains a tiny model).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_grading_reading import BASELINE, FIT, _cell_of, _solution

from course_tools.grade.core import checks, reading

ANCHOR = 'fit_model.save(ARTIFACTS / "fit_model.keras")'
#: The line of the solution's fit cell just before fit_model's fit runs.
BEFORE_FIT = "fit_clock = EpochClock()"
SINGLE_SAVE = 'single_model.save(ARTIFACTS / "single_model.keras")'


def _no_load_in_fit_model(honest: str) -> None:
    """The solution with `honest` after fit_model's save reads no load into fit_model, and it
    still reads as created in the strategy's scope."""
    code = _solution({ANCHOR: f"{ANCHOR}\n{honest}"})
    assert reading.Code.of(code).hand_steps("fit_model", loads=True) == []
    checks.assert_created_in_scope(code, "fit_model")
    checks.clear_cache()


def _refused(code: dict, anchor: str, why: str) -> None:
    """`assert_readable` refuses `code` for `why`, naming the cell that holds `anchor`."""
    cell = _cell_of(code, anchor)
    with pytest.raises(checks.CheckError, match=rf"{why}.* \(cell \[{cell}\]: "):
        checks.assert_readable(code)
    checks.clear_cache()


MODEL_WRITE = r"what a model \(or its fit's History\) holds"


def test_no_weights_load_into_a_fit_graded_model_before_or_after_its_fit():
    """Red team 25a's stopiter, setparams, nofit and nosingle (12/12): a load into `fit_model`
    (or `single_model`) after its fit in the text, also behind a fit that never runs (`if not
    EPOCHS:`), was taken for restoring its own checkpoint. Every load into a fit-graded model
    now counts, wherever it stands; the solution, which restores into a new model, has none."""
    for model, anchor, late in (
        ("fit_model", ANCHOR, f"{ANCHOR}\nfit_model.load_weights(latest_fit)"),
        ("fit_model", ANCHOR, f'fit_model.load_weights("/tmp/best.weights.h5")\n{ANCHOR}'),
        (
            "fit_model",
            BEFORE_FIT,
            "if not EPOCHS:\n    fit_model.fit(train_ds, epochs=EPOCHS)\n"
            f'fit_model.load_weights("/tmp/one.weights.h5")\n{BEFORE_FIT}',
        ),
        (
            "single_model",
            SINGLE_SAVE,
            f'single_model.load_weights("/tmp/nudged.weights.h5")\n{SINGLE_SAVE}',
        ),
    ):
        code = _solution({anchor: late})
        loads = reading.Code.of(code).hand_steps(model, loads=True)
        assert loads and loads[0][0] == _cell_of(code, anchor), (model, late, loads)
        if model == "fit_model":  # single_model's loads cost own_model (its file's points)
            with pytest.raises(checks.CheckError, match="weights loaded into it from elsewhere"):
                checks.assert_created_in_scope(code, model)
        checks.clear_cache()
    solution = reading.Code.of(_solution())
    assert solution.hand_steps("fit_model", loads=True) == []
    assert solution.hand_steps("single_model", loads=True) == []


def test_a_loader_bound_to_another_name_is_read_as_the_load_it_is():
    """Red team 25a's aliasload (12/12): `sw = keras.Model.set_weights; sw(fit_model, w)` before
    the fit (and `lw = keras.Model.load_weights`) was no load to the reading. A loader bound to a
    name, bound from the model (`lw = fit_model.load_weights`), or given with the model to
    another call (`functools.partial`) counts as the load; the solution's own loads into new
    models do not."""
    for forged in (
        "lw = keras.Model.load_weights\nlw(fit_model, 'classmate.weights.h5')",
        "sw = keras.Model.set_weights\nsw(fit_model, classmate.get_weights())",
        "sw = keras.Model.set_weights\nsw2 = sw\nsw2(fit_model, classmate.get_weights())",
        "lw = fit_model.load_weights\nlw('classmate.weights.h5')",
        "lw = getattr(keras.Model, 'load_weights')\nlw(fit_model, 'classmate.weights.h5')",
        "import functools\nfunctools.partial(keras.Model.load_weights, fit_model)('c.h5')",
    ):
        code = _solution({BEFORE_FIT: f"{forged}\n{BEFORE_FIT}"})
        assert reading.Code.of(code).hand_steps("fit_model", loads=True), forged
        with pytest.raises(checks.CheckError, match="weights loaded into it from elsewhere"):
            checks.assert_created_in_scope(code, "fit_model")
        checks.clear_cache()


def test_historys_own_writers_are_writes_of_the_history():
    """Red team 25a's setparams and nofit (12/12): `fit_model.history.set_params(...)` after a
    fit of one batch an epoch, and a `keras.callbacks.History()` of the notebook's own wired to
    fit_model (`set_model`, `set_params`, `on_train_begin`, `on_epoch_end`, which sets
    `fit_model.history`), wrote what the probe reads. Each spelling (the method, the class's,
    `getattr`, a name bound to the method, a function given the History, a History held in a
    namespace, a `CallbackList` keeping one) makes the reading unreadable, naming the cell. A
    callback's `super().on_epoch_end(...)`, Keras's class spelling given `self`, matplotlib's
    `set_params` and a callback of the notebook's own called by hand stay readable."""
    for forged in (
        "fit_model.history.set_params({'verbose': 2, 'epochs': EPOCHS, 'steps': 16})",
        "keras.callbacks.History.set_params(fit_model.history, {'epochs': EPOCHS})",
        "record = keras.callbacks.History()\nrecord.set_model(fit_model)\n"
        "record.on_train_begin()\nfor epoch in range(EPOCHS):\n    record.on_epoch_end(epoch)",
        "from keras.callbacks import History\nHistory().set_model(fit_model)",
        "h = fit_model.history\nh.on_epoch_end(3)",
        "getattr(fit_model.history, 'set_params')({})",
        "w = fit_model.history.on_epoch_end\nw(0)",
        "def forge(h):\n    h.set_params({'steps': 16})\nforge(fit_model.history)",
        "import types\nbox = types.SimpleNamespace()\nbox.h = fit_model.history\n"
        "box.h.epoch.append(3)",
        "kept = []\nkept.append(fit_model.history)\nkept[0].params['steps'] = 16",
        "calls = keras.callbacks.CallbackList(add_history=True, model=fit_model)\n"
        "calls.on_epoch_end(0)",
        "keras.callbacks.Callback.set_model(single_model.history, fit_model)",
    ):
        _refused(_solution({ANCHOR: f"{ANCHOR}\n{forged}"}), ANCHOR, MODEL_WRITE)
    honest = (
        "class Quiet(keras.callbacks.Callback):\n"
        "    def on_epoch_end(self, epoch, logs=None):\n"
        "        super().on_epoch_end(epoch, logs)\n"
        "        keras.callbacks.Callback.on_epoch_end(self, epoch, logs)\n"
        "Quiet().on_epoch_end(0)\n"
        "import matplotlib.pyplot as plt\n"
        "plt.gca().xaxis.get_major_locator().set_params(integer=True)\n"
        "kept = keras.callbacks.History()\n"
        "print(fit_model.history.params, len(fit_model.history.epoch))"
    )
    checks.assert_readable(_solution({ANCHOR: f"{ANCHOR}\n{honest}"}))


def test_history_fields_set_on_objects_not_tied_to_a_model_or_history_are_readable():
    """Red team 25a's nshist (1/12): `run_info.history = fit_model.history.history` on a
    SimpleNamespace (the metrics kept to plot them) made every code point unreadable; so did
    `.epoch` or `.params` on an object of the notebook's own class. Those read now; the same
    fields set on a model, on a fit's History or on a name bound to one (an alias, a loop's
    target, a namespace holding it) still make the reading unreadable."""
    honest = (
        "import types\nrun_info = types.SimpleNamespace()\n"
        "run_info.history = fit_model.history.history\n"
        "class Log:\n    pass\nlog = Log()\nlog.epoch = 0\nlog.params = {'lr': 1e-3}\n"
        "setattr(log, 'epoch', 1)\nrun_info.params = dict(epochs=EPOCHS)\n"
        "run_info.params.update(steps=16)"
    )
    checks.assert_readable(_solution({ANCHOR: f"{ANCHOR}\n{honest}"}))
    for forged in (
        "fit_model.history.epoch = [0, 1, 2]",
        "h = fit_model.history\nh.params = {'epochs': 3}",
        "_h = fit_model.fit(train_ds, epochs=EPOCHS, initial_epoch=EPOCHS)\n_h.epoch = [0, 1]",
        "for h in [fit_model.history]:\n    h.epoch = [0, 1, 2]",
        "setattr(fit_model.history, 'epoch', [0, 1, 2])",
        "import types\nbox = types.SimpleNamespace(h=None)\nbox.h = fit_model.history\n"
        "box.h.params = {}",
        "m = single_model\nm.history.epoch[:] = [0, 1, 2]",
    ):
        _refused(_solution({ANCHOR: f"{ANCHOR}\n{forged}"}), ANCHOR, MODEL_WRITE)


def test_config_of_which_values_a_cell_shows_reads_and_other_configs_do_not():
    """Red team 25a's config (1/12): the README says `%config
    InteractiveShell.ast_node_interactivity = 'all'` is fine, and it made every code point
    unreadable. It reads now (a literal value only, as for `InlineBackend`); another
    `InteractiveShell` setting or a value that is code is still refused."""
    code = _solution({ANCHOR: f"{ANCHOR}\n%config InteractiveShell.ast_node_interactivity = 'all'"})
    checks.assert_readable(code)
    checks.assert_pipeline_code(code, "train_ds", "train")
    assert reading.Code.of(code).shell_reached() == []
    for line in (
        "%config InteractiveShell.ast_node_interactivity = (train_ds := train_cached)",
        "%config InteractiveShell.autocall = 2",
    ):
        _refused(_solution({ANCHOR: f"{ANCHOR}\n{line}"}), ANCHOR, "the Python a line magic runs")


def test_an_attribute_of_a_librarys_object_got_through_a_call_is_no_module_attribute():
    """Red team 25a's logger (1/12): `logging.getLogger("tensorflow").level = logging.ERROR` was
    read as a module's attribute set ("reached through a call"). A library's call given no
    module gives none; the calls that give modules (`importlib.import_module`, `__import__`,
    `inspect.getmodule`, `sys.modules.get`, `getattr` by a name not written out, the notebook's
    own function) still do."""
    for honest in (
        "import logging\nlogging.getLogger('tensorflow').level = logging.ERROR",
        "import logging\nlogging.getLogger('absl').setLevel(logging.ERROR)",
    ):
        checks.assert_readable(_solution({ANCHOR: f"{ANCHOR}\n{honest}"}))
    for forged in (
        "import importlib\nimportlib.import_module('tqdm').tqdm = list",
        "__import__('tqdm').tqdm = list",
        "import inspect\ninspect.getmodule(make_model).train_ds = train_cached",
        "import sys\nname = 'tqdm'\nsys.modules.get(name).tqdm = list",
        "import tqdm\nname = 'tqdm'\ngetattr(tqdm, name).tqdm = list",
        "import tqdm\ndef mod():\n    return tqdm\nmod().tqdm = list",
        "import functools, tqdm\nfunctools.reduce(getattr, ['auto'], tqdm).tqdm = list",
    ):
        why = "(what a module's names stand for|code run through exec/eval/globals)"
        _refused(_solution({ANCHOR: f"{ANCHOR}\n{forged}"}), ANCHOR, why)


def _trained(tmp_path: Path, callbacks: list) -> dict:  # noqa: ANN001
    """The probe's facts of a small model fit 2 epochs on 4 batches of 8 with `callbacks`,
    saved as fit_model.keras in `tmp_path`; the GLOBAL_BATCH the probe read, 8."""
    import keras
    import numpy as np

    from course_tools.grade.core import probe

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    model.compile(optimizer=keras.optimizers.Adam(), loss="mse")
    rng = np.random.default_rng(0)
    data = (rng.random((32, 4)), rng.random((32, 3)))
    model.fit(*data, batch_size=8, epochs=2, callbacks=callbacks, verbose=0)
    model.save(tmp_path / "fit_model.keras")
    checks.clear_cache()
    found = probe.collect({"fit_model": model}, models=["fit_model"])
    found["global_batch"] = 8
    return found


def test_the_kernel_step_count_is_every_batch_of_every_epoch_whatever_history_says(
    tmp_path, monkeypatch
):
    """Red team 25a's stopiter, lambdastop and toggle (12/12): a callback ends each epoch after
    its first batch (`raise StopIteration`, or `stop_training` set and cleared), while Keras's
    History lists every epoch and `params["steps"]` the full count. `own_model` now checks the
    kernel's own optimizer count against EPOCHS epochs of the training set's steps (the hidden
    test's `epochs`, else the grader's profile, `graded_epochs`), whatever the History says. A
    fit of every batch passes; the custom loop's model and the solution's own kernel (no
    observations) are not checked here."""
    import keras

    monkeypatch.setattr(checks, "_labels", lambda split: {"count": 32})  # 4 batches of 8

    class OneBatch(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):  # noqa: ANN001, ARG002
            raise StopIteration

    found = _trained(tmp_path, [OneBatch()])
    fact = found["models"]["fit_model"]
    assert (fact["fit_epochs"], fact["fit_steps"], fact["optimizer_steps"]) == ([2, 2], 4, 2)
    with pytest.raises(checks.CheckError, match=r"made 2 optimizer steps, but 2 epochs .* make 8"):
        checks.own_model(tmp_path, "fit_model", found, _solution(), epochs=2)
    checks.clear_cache()
    monkeypatch.setenv("COURSE_PROFILE", "quick")
    monkeypatch.setenv("COURSE_DEVICES", "2")
    assert checks.graded_epochs({}) == 3
    assert checks.graded_epochs(None) is None
    with pytest.raises(checks.CheckError, match=r"made 2 optimizer steps, but 3 epochs"):
        checks.own_model(tmp_path, "fit_model", found, _solution())
    checks.clear_cache()
    checks.own_model(tmp_path, "fit_model", found)  # the solution's kernel: no observations
    checks.clear_cache()
    found = _trained(tmp_path, [])
    assert found["models"]["fit_model"]["optimizer_steps"] == 8
    checks.own_model(tmp_path, "fit_model", found, _solution(), epochs=2)
    checks.clear_cache()
    with pytest.raises(checks.CheckError, match=r"made 8 optimizer steps, but 3 epochs"):
        checks.own_model(tmp_path, "fit_model", found, _solution())
    checks.clear_cache()
    del found["global_batch"]  # GLOBAL_BATCH not an int at the end: 64 a device, 2 devices
    with pytest.raises(checks.CheckError, match=r"3 epochs of the training set .* make 3"):
        checks.own_model(tmp_path, "fit_model", found, _solution())
    checks.clear_cache()


#: Red team 26a's fit_model compiled with a learning rate of 0 (its fit trains nothing).
COMPILED = "        optimizer=keras.optimizers.Adam(),"
CLASSMATE = "src = keras.models.load_model('/tmp/classmate.keras')\n"


def test_weights_written_into_a_fit_graded_model_through_its_layers_or_variables_are_a_load():
    """Red team 26a's forged (11/12): single_model's weights put into fit_model layer by layer
    (`mine.set_weights(...)` over `zip(fit_model.layers, single_model.layers)`) were no load to
    the reading, which only counted a loader called on the model itself. A loader or a
    variable's writer (`assign`, `assign_add`, `assign_sub`) reached from the model's layers or
    variables (an index, `get_layer`, a layer's kernel, a name bound to one, a loop's, a
    lambda's or a helper's variable fed them, through `map`, `tf.nest` or `getattr`) is a load;
    reading them (shapes, `get_weights()`, copying them into a new model) is not."""
    for forged in (
        CLASSMATE + "for mine, theirs in zip(fit_model.layers, src.layers):\n"
        "    mine.set_weights(theirs.get_weights())",
        CLASSMATE + "fit_model.layers[1].set_weights(src.layers[1].get_weights())",
        "fit_model.get_layer('dense').set_weights(w)",
        "for l in fit_model.layers:\n    l.load_own_variables(store)",
        CLASSMATE + "for v, w in zip(fit_model.weights, src.weights):\n    v.assign(w)",
        "for v in fit_model.trainable_variables:\n    v.assign(v * 1.0)",
        CLASSMATE + "list(map(lambda p: p[0].assign(p[1]), zip(fit_model.weights, src.weights)))",
        CLASSMATE
        + "tf.nest.map_structure(lambda v, w: v.assign(w), fit_model.weights, src.weights)",
        "fit_model.layers[-1].kernel.assign(fit_model.layers[-1].kernel * 1.01)",
        "ls = fit_model.layers\nls[1].set_weights(w)",
        "k = fit_model.layers[-1].kernel\nk.assign_add(k)",
        "for i, layer in enumerate(fit_model.layers):\n    layer.set_weights(w[i])",
        "[v.assign(w) for v, w in zip(fit_model.variables, ws)]",
        "list(map(tf.Variable.assign, fit_model.weights, ws))",
        "keras.backend.batch_set_value(zip(fit_model.weights, ws))",
        "tf.compat.v1.assign(fit_model.weights[0], ws[0])",
        "keras.layers.Layer.set_weights(fit_model.layers[1], ws)",
        "def put(v, w):\n    v.assign(w)\nfor v, w in zip(fit_model.non_trainable_variables, ws):\n"
        "    put(v, w)",
        "getattr(fit_model.layers[1], 'set_weights')(ws)",
        "a = fit_model.trainable_weights[0].assign\na(ws[0])",
        "import operator\nlist(map(operator.methodcaller('assign', 0.0), fit_model.weights))",
        "keras.optimizers.SGD(1.0).apply_gradients(zip(gs, fit_model.trainable_variables))",
        "for layer in fit_model.layers:\n    for v in layer.weights:\n        v.assign(v)",
    ):
        code = _solution({ANCHOR: f"{forged}\n{ANCHOR}"})
        loads = reading.Code.of(code).hand_steps("fit_model", loads=True)
        assert loads and loads[0][0] == _cell_of(code, ANCHOR), (forged, loads)
    code = _solution(
        {
            SINGLE_SAVE: f"{SINGLE_SAVE}\n{CLASSMATE.replace('src', 'theirs')}"
            "for mine, theirs in zip(fit_model.layers, single_model.layers):\n"
            "    mine.set_weights([w * 1.0001 for w in theirs.get_weights()])"
        }
    )
    with pytest.raises(checks.CheckError, match="weights loaded into it from elsewhere"):
        checks.assert_created_in_scope(code, "fit_model")
    checks.clear_cache()
    assert reading.Code.of(code).hand_steps("single_model", loads=True) == []
    honest = (
        "for layer in fit_model.layers:\n"
        "    print(layer.name, [w.shape for w in layer.get_weights()])\n"
        "print([v.numpy().shape for v in fit_model.weights])\nfit_model.summary()\n"
        "copy = make_model()\ncopy.set_weights(fit_model.get_weights())\n"
        "layered = make_model()\nfor a, b in zip(layered.layers, fit_model.layers):\n"
        "    a.set_weights(b.get_weights())\n"
        "assigned = make_model()\nfor a, b in zip(assigned.weights, fit_model.weights):\n"
        "    a.assign(b)"
    )
    _no_load_in_fit_model(honest)


def test_one_set_of_initial_weights_bound_to_a_name_is_no_load():
    """Red team 26a's sameinit (7/12): `initial_weights = make_model().get_weights()` given to
    `fit_model.set_weights` in its scope (and `make_model().get_weights()` given directly) was
    read as a load, while the README sets one set of initial weights aside. Weights of a new
    model of the notebook's own maker, bound to a name used only to be given them, are no
    load; a name bound to a trained model's or a file's weights, weights changed after, a
    maker sharing another model's layers and a helper that loads or returns another model
    still are."""
    made = "    fit_model = make_model()"
    for honest in (
        "    initial_weights = make_model().get_weights()\n    fit_model = make_model()\n"
        "    fit_model.set_weights(initial_weights)",
        "    fit_model = make_model()\n    fit_model.set_weights(make_model().get_weights())",
        "    w0 = keras.models.clone_model(make_model()).get_weights()\n    print(len(w0))\n"
        "    fit_model = make_model()\n    fit_model.set_weights(w0)",
    ):
        code = _solution({made: honest})
        assert reading.Code.of(code).hand_steps("fit_model", loads=True) == [], honest
        checks.assert_created_in_scope(code, "fit_model")
        checks.clear_cache()
    helpers = (
        "def trained():\n    m = make_model()\n    m.load_weights('c.h5')\n    return m\n"
        "def other():\n    return single_model\n"
    )
    for forged in (
        "    w = single_model.get_weights()\n    fit_model = make_model()\n"
        "    fit_model.set_weights(w)",
        "    w = make_model().get_weights()\n"
        "    w = keras.models.load_model('c.keras').get_weights()"
        "\n    fit_model = make_model()\n    fit_model.set_weights(w)",
        "    w = make_model().get_weights()\n    w[0][:] = 1\n    fit_model = make_model()\n"
        "    fit_model.set_weights(w)",
        f"{made}\n    fit_model.set_weights(keras.Sequential(single_model.layers).get_weights())",
        f"{made}\n    fit_model.set_weights(keras.models.load_model('c.keras').get_weights())",
        f"{made}\n    fit_model.set_weights(trained().get_weights())",
        f"{made}\n    fit_model.set_weights(other().get_weights())",
    ):
        code = _solution({made: forged}, added=(helpers,))
        assert reading.Code.of(code).hand_steps("fit_model", loads=True), forged


def test_a_learning_rate_too_small_given_at_compile_is_a_step_outside_fit():
    """Red team 26a's lr0only: `fit_model.compile(optimizer=keras.optimizers.Adam(
    learning_rate=0.0))` read fine, while the same rate set after compile is read as steps
    outside fit. A literal rate below 1e-6 given to the optimizer fit_model compiles with
    (by keyword or position, inside a `LossScaleOptimizer`, or an optimizer bound to a name
    first) counts as that rate set later; a rate that trains does not."""
    for forged in (
        "        optimizer=keras.optimizers.Adam(learning_rate=0.0),",
        "        optimizer=keras.optimizers.SGD(0),",
        "        optimizer=keras.optimizers.Adam(1e-9),",
        "        optimizer=keras.mixed_precision.LossScaleOptimizer("
        "keras.optimizers.Adam(learning_rate=0)),",
    ):
        code = _solution({COMPILED: forged})
        assert reading.Code.of(code).hand_steps("fit_model"), forged
    code = _solution(
        {
            "    fit_model = make_model()": "    slow = keras.optimizers.Adam(learning_rate=0.0)\n"
            "    fit_model = make_model()",
            COMPILED: "        optimizer=slow,",
        }
    )
    with pytest.raises(checks.CheckError, match="steps of its optimizer outside fit"):
        checks.assert_created_in_scope(code, "fit_model")
    checks.clear_cache()
    for honest in (
        "        optimizer=keras.optimizers.Adam(learning_rate=1e-3),",
        "        optimizer=keras.optimizers.SGD(0.01, momentum=0.0),",
        "        optimizer='adam',",
    ):
        assert reading.Code.of(_solution({COMPILED: honest})).hand_steps("fit_model") == []


def test_a_load_through_the_notebooks_own_helper_is_a_load():
    """A loader called in the notebook's own function on a parameter given fit_model
    (`def ld(m, p): m.load_weights(p)`; `ld(fit_model, path)`), or writing the layers of one,
    is a load, as the reading already follows helpers for the optimizer's steps; the same
    helper given a new model is not."""
    for forged in (
        "def ld(m, p):\n    m.load_weights(p)\nld(fit_model, '/tmp/c.weights.h5')",
        "def ld(m, p):\n    keras.Model.load_weights(m, p)\nld(fit_model, '/tmp/c.weights.h5')",
        "def cp(m, src):\n    for a, b in zip(m.layers, src.layers):\n"
        "        a.set_weights(b.get_weights())\ncp(fit_model, single_model)",
    ):
        code = _solution({ANCHOR: f"{forged}\n{ANCHOR}"})
        assert reading.Code.of(code).hand_steps("fit_model", loads=True), forged
    honest = "def ld(m, p):\n    m.load_weights(p)\nrestored_x = make_model()\n"
    honest += "ld(restored_x, latest_fit)"
    code = _solution({ANCHOR: f"{ANCHOR}\n{honest}"})
    assert reading.Code.of(code).hand_steps("fit_model", loads=True) == []


RESTORE = "    restored_fit = make_model()\n    # before compile"
RESTORED = "    restored_fit.load_weights(latest_fit)"


def test_a_name_stands_for_fit_model_only_until_it_is_bound_again():
    """Review s10-revB4 F1 (5 of 12 points): `for model in (fit_model, single_model)` in
    question 4, then `model = make_model()` and `model.load_weights(...)` in question 6 (a),
    read as a load into fit_model and single_model, as if the name held them for ever. A name
    stands for the model from its binding to it until it is bound again, in the order the cells
    run (a `for` over a literal list binds its target at the loop); loads through an alias
    while it holds the model are still refused (`best = fit_model`, a loop over the models, a
    loop that binds it again after the load in its body, a binding that may not run)."""
    looped = f"{SINGLE_SAVE}\nfor model in (fit_model, single_model):\n    print(model.name)"
    for restore in (
        "    model = make_model()\n    # before compile",  # under `with strategy.scope():`
        "    restored_fit = make_model()\nmodel = make_model()\nmodel.load_weights(latest_fit)\n"
        "with strategy.scope():\n    # before compile",
        "    restored_fit = make_model()\nfor model in (make_model(),):\n"
        "    model.load_weights(latest_fit)\nwith strategy.scope():\n    # before compile",
    ):
        changes = {SINGLE_SAVE: looped, RESTORE: restore}
        if restore.startswith("    model"):
            changes[RESTORED] = "    model.load_weights(latest_fit)\n    restored_fit = model"
        code = _solution(changes)
        read = reading.Code.of(code)
        for model in ("fit_model", "single_model"):
            assert read.hand_steps(model, loads=True) == [], (restore, model)
        checks.assert_created_in_scope(code, "fit_model")
        checks.clear_cache()
    for forged in (
        "best = fit_model\nbest.load_weights('/tmp/c.weights.h5')",
        "for m in (fit_model, single_model):\n    m.set_weights(m.get_weights())",
        "model = make_model()\nfor i in range(2):\n    if i:\n"
        "        model.load_weights('/tmp/c.weights.h5')\n    model = fit_model",
        "best = fit_model\nif EPOCHS > 99:\n    best = make_model()\nbest.load_weights('c.h5')",
        "for best in (fit_model,):\n    pass\nfor best in []:\n    pass\nbest.load_weights('c.h5')",
        "def f():\n    model = fit_model\n    model.load_weights('c.h5')\nmodel = 1\nf()",
    ):
        code = _solution({ANCHOR: f"{ANCHOR}\n{forged}"})
        loads = reading.Code.of(code).hand_steps("fit_model", loads=True)
        assert loads and loads[0][0] == _cell_of(code, ANCHOR), forged


def test_a_helper_fitting_on_the_global_train_ds_reads_the_same_for_both_models():
    """Review s10-revB4 F2 (1 point, and a false message): one helper `def train(model,
    callbacks): model.fit(train_ds, ...)` on the global `train_ds`, accepted for fit_model,
    read for single_model as training 'on something else'. The baseline's reading now takes a
    helper's bare global name as the distributed runs' reading does (not a parameter, not
    bound in the helper); a helper fitting on another dataset, or on a local of that name, is
    still refused."""
    helper = "def train(model, callbacks):\n    model.fit({}, epochs=EPOCHS, callbacks=callbacks)\n"
    fit_call = f"    {FIT}=EPOCHS, callbacks=[fit_clock, fit_checkpoints], verbose=2)"
    baseline = BASELINE
    scoped = "with strategy.scope():\n    fit_model = make_model()"
    both = {
        scoped: helper.format("train_ds") + "\n\n" + scoped,
        fit_call: "    train(fit_model, [fit_clock, fit_checkpoints])",
        baseline: "train(single_model, [single_clock])",
    }
    alone = {baseline: helper.format("train_ds") + "train(single_model, [single_clock])"}
    for changes in (both, alone):
        code = _solution(changes)
        checks.assert_pipeline_code(code, "train_ds", "train")
        checks.assert_baseline_code(code, "single_model", "train_ds")
        checks.clear_cache()
    for dataset in ("train_cached.batch(GLOBAL_BATCH)", "train_ds.take(3)"):
        code = _solution({baseline: helper.format(dataset) + "train(single_model, [])"})
        with pytest.raises(checks.CheckError, match="trains `single_model` on something else"):
            checks.assert_baseline_code(code, "single_model", "train_ds")
        checks.clear_cache()
    local = "def train(model):\n    train_ds = train_cached.batch(GLOBAL_BATCH)\n"
    code = _solution({baseline: local + "    model.fit(train_ds)\ntrain(single_model)"})
    with pytest.raises(checks.CheckError, match="trains `single_model` on something else"):
        checks.assert_baseline_code(code, "single_model", "train_ds")
    checks.clear_cache()


def test_code_the_kernel_ran_but_the_reading_cannot_parse_or_passes_the_cap_is_unreadable():
    """Red team 27a's unread (12/12): a cell nested too deep for the check process to parse
    (the kernel parses it after `sys.setrecursionlimit(20000)`), or read past `_MagicBodies`,
    and the code past `reading.MAX_CHARS` (blanked in the observations), were left out of the
    reading without a word, with every rule of the code hidden behind them. Each is now
    unreadable, naming its cell; a cell that does not parse at all ran nothing (still read
    past)."""
    load = "fit_model.set_weights([w * 1.0001 for w in donor.get_weights()])"
    for deep in ("_ = None if True else a" + ".b" * 3000, "junk = a" + ".b" * 990):
        code = _solution({ANCHOR: f"{deep}\n{load}\n{ANCHOR}"})
        cell = _cell_of(code, ANCHOR)
        with pytest.raises(checks.CheckError, match=rf"nested this deep.*\(cell \[{cell}\]: "):
            checks.assert_readable(code)
        checks.clear_cache()
        assert f"cell [{cell}]" in " ".join(reading.Code.of(code).unread_code())
    code = _solution({ANCHOR: f"{ANCHOR}\nthis is no Python"})
    checks.assert_readable(code)
    checks.clear_cache()
    pad = "PAD = '" + "x" * reading.MAX_CHARS + "'"
    code = _solution({ANCHOR: f"{pad}\n{ANCHOR}"})
    cell = _cell_of(code, ANCHOR)
    with pytest.raises(checks.CheckError, match=rf"2,000,000 characters.*cell \[{cell}\]"):
        checks.assert_readable(code)
    checks.clear_cache()
    cells = [dict(c) for c in code["cells"]]  # as one_submission.observations cuts them
    chars = 0
    for c in cells:
        chars += len(c["source"])
        if chars > reading.MAX_CHARS:
            c["cut"], c["source"] = bool(c["source"].strip()), ""
    cut = {"cells": cells, "files": {}}
    with pytest.raises(checks.CheckError, match=rf"2,000,000 characters.*cell \[{cell}\]"):
        checks.assert_readable(cut)
    checks.clear_cache()


def test_a_helper_copying_out_of_fit_model_and_initial_weights_looked_at_are_no_loads():
    """Red team 27a's backup (7/12, honest): `def copy_into(dst, src):
    dst.set_weights(src.get_weights())` called `copy_into(backup, fit_model)` (or by keywords)
    was a load into fit_model: only the receiver of a loader reached from the model is loaded
    into, never an argument. One set of initial weights looked at before it is given
    (`print(initial[0].shape)`, `for w in initial: print(w.shape)`) stays the honest shared
    start; written into, or the helper given fit_model as `dst`, it is a load."""
    helper = (
        "def copy_into(dst, src):\n    dst.set_weights(src.get_weights())\nbackup = make_model()\n"
    )
    made = "    fit_model = make_model()"
    start = (
        "    initial = make_model().get_weights()\n{}    fit_model = make_model()\n"
        "    fit_model.set_weights(initial)"
    )
    honest = [
        {ANCHOR: f"{ANCHOR}\n{helper}copy_into(backup, fit_model)"},
        {ANCHOR: f"{ANCHOR}\n{helper}copy_into(src=fit_model, dst=backup)"},
        {made: start.format("    print(initial[0].shape, len(initial))\n")},
        {made: start.format("    for w in initial:\n        print(w.shape)\n")},
    ]
    forged = [
        {ANCHOR: f"{ANCHOR}\n{helper}copy_into(fit_model, backup)"},
        {ANCHOR: f"{ANCHOR}\n{helper}copy_into(dst=fit_model, src=backup)"},
        {made: start.format("    initial[0][:] = 0\n")},
        {made: start.format("    for w in initial:\n        w[:] = 0\n")},
        {made: start.format("    initial[0].fill(0)\n")},
    ]
    for changes in honest:
        code = _solution(changes)
        assert reading.Code.of(code).hand_steps("fit_model", loads=True) == [], changes
        checks.assert_created_in_scope(code, "fit_model")
        checks.clear_cache()
    for changes in forged:
        code = _solution(changes)
        assert reading.Code.of(code).hand_steps("fit_model", loads=True), changes


def test_weights_written_through_what_fit_model_is_built_from_are_loads():
    """Red team 27a's heldlayers and donated (12/12): weights put into fit_model through a layer
    or model it shares with an object the notebook holds (`parts` placed in it, a `head` layer,
    `keras.Sequential(pre.layers)`, `keras.Model(pre.inputs, pre.outputs)`, `clone_model(pre,
    clone_function=...)`), given as initializers (`Constant(w)` of a donor's arrays, through an
    alias, a lambda), through a callback's `self.model` bound to a name or by `getattr`, or
    through a container of its layers (`ls.append`, an object's attribute, `dict.get`,
    `next(iter(...))`). A write into (or a fit of) anything fit_model is built from is one into
    it; `make_model()`, a literal `Constant(0.1)`, a seeded initializer and `clone_model(pre)`
    (new layers) share nothing."""
    made = "    fit_model = make_model()"
    donor = "    donor = keras.models.load_model('/tmp/donor.keras')\n"
    maker = (  # in the scope's `with`, as the solution's fit_model is
        "    def make_from(ws, init):\n        C = keras.initializers.Constant\n"
        "        return keras.Sequential([keras.Input(shape=(32, 32, 3)), keras.layers.Flatten(),\n"
        "            keras.layers.Dense(10, kernel_initializer={}, bias_initializer={})])\n"
    )
    cb = "class Warm(keras.callbacks.Callback):\n    def on_train_begin(self, logs=None):\n"
    pre = donor + "    pre = make_model()\n"
    given = "    fit_model = make_from(donor.get_weights(), 0)"
    forged = [
        {
            made: donor + "    parts = [keras.Input(shape=(32, 32, 3)), *make_model().layers]\n"
            "    fit_model = keras.Sequential(parts)\n"
            "    for mine, theirs in zip(parts[1:], donor.layers):\n"
            "        mine.set_weights(theirs.get_weights())"
        },
        {
            made: donor + "    head = keras.layers.Dense(10)\n"
            "    fit_model = keras.Sequential([*make_model().layers[:-1], head])\n"
            "    head.kernel.assign(donor.layers[-1].kernel)"
        },
        {
            made: pre + "    pre.set_weights(donor.get_weights())\n"
            "    fit_model = keras.Sequential(pre.layers)"
        },
        {
            made: pre + "    pre.fit(train_ds, epochs=EPOCHS)\n"
            "    fit_model = keras.Model(pre.inputs, pre.outputs)"
        },
        {
            made: pre + "    pre.fit(train_ds)\n    x = keras.Input(shape=(32, 32, 3))\n"
            "    fit_model = keras.Model(x, pre(x))"
        },
        {
            made: pre + "    pre.set_weights(donor.get_weights())\n"
            "    fit_model = keras.models.clone_model(pre, clone_function=lambda layer: layer)"
        },
        {made: maker.format("C(ws[0])", "'zeros'") + donor + given},
        {made: maker.format("lambda shape, dtype=None: ws[0]", "'zeros'") + donor + given},
        {
            made: maker.format("init", "'zeros'")
            + donor
            + "    fit_model = make_from(0, keras.initializers.Constant(donor.get_weights()[0]))"
        },
        {ANCHOR: cb + "        m = self.model\n        m.set_weights(DONOR)\n" + ANCHOR},
        {ANCHOR: cb + "        getattr(self, 'model').set_weights(DONOR)\n" + ANCHOR},
        {ANCHOR: "ls = []\nls.append(fit_model.layers[-1])\nls[0].set_weights(W)\n" + ANCHOR},
        {
            ANCHOR: "class Box:\n    pass\nb = Box()\nb.layer = fit_model.layers[-1]\n"
            "b.layer.set_weights(W)\n" + ANCHOR
        },
        {
            ANCHOR: "parts = dict(zip(['a', 'b'], fit_model.layers))\n"
            "parts.get('a').set_weights(W)\n" + ANCHOR
        },
        {ANCHOR: "it = iter(fit_model.layers)\nnext(it).set_weights(W)\n" + ANCHOR},
        {
            made: donor + "    def build(src):\n        m = make_model()\n"  # a maker that loads
            "        for a, b in zip(m.layers, src.layers):\n"
            "            a.set_weights(b.get_weights())\n"
            "        return m\n    fit_model = build(donor)"
        },
        {
            made: "    head = keras.layers.Dense(10)\n"
            "    fit_model = keras.Sequential([*make_model().layers[:-1], head])\n"
            "    head.kernel_initializer = keras.initializers.Constant(W)"
        },
    ]
    honest = [
        {
            made: maker.format("keras.initializers.Constant(0.1)", "init") + "    SEED = 1\n"
            "    fit_model = make_from(0, keras.initializers.HeNormal(seed=SEED))"
        },
        {
            made: pre + "    pre.fit(train_ds, epochs=1)\n"
            "    fit_model = keras.models.clone_model(pre)"
        },
        {made: "    model = make_model()\n    fit_model = model"},
        {
            made: "    def made(ds):\n        print(train_ds, ds)\n        return make_model()\n"
            "    fit_model = made(train_ds)"
        },  # the data it names is no part of the model
        {ANCHOR: cb + "        m = self.model\n        print(m.count_params())\n" + ANCHOR},
    ]
    for changes in forged:
        code = _solution(changes)
        assert reading.Code.of(code).hand_steps("fit_model", loads=True), changes
    for changes in honest:
        code = _solution(changes)
        assert reading.Code.of(code).hand_steps("fit_model", loads=True) == [], changes
        checks.assert_created_in_scope(code, "fit_model")
        checks.clear_cache()


def test_a_learning_rate_too_small_to_move_a_weight_is_read_by_its_value():
    """Red team 27a's stilled (11/12 with a fit that learned nothing): the rule of a learning
    rate below 1e-6 at compile read only a literal. It now reads the value: a name bound once
    to constant arithmetic, `1e-3 * 0`, `float('0')`, `lambda: 0.0`, a schedule starting from
    0, `Adam(**{...})`, `optimizers.get({...})` and `from_config({...})` of a literal dict. A
    rate that trains (`LR = 1e-3`, `1e-5`) is no step outside fit."""
    compiled = "        optimizer=keras.optimizers.Adam(),"
    made = "    fit_model = make_model()"
    adam = "        optimizer=keras.optimizers.Adam({}),"
    tiny = [
        {made: "    STILL = 0.0\n" + made, compiled: adam.format("learning_rate=STILL")},
        {made: "    LR, B = 0.0, 1\n" + made, compiled: adam.format("LR")},
        {compiled: adam.format("learning_rate=1e-3 * 0")},
        {compiled: adam.format("learning_rate=float('0')")},
        {compiled: adam.format("learning_rate=lambda: 0.0")},
        {compiled: adam.format("keras.optimizers.schedules.ExponentialDecay(0.0, 10, 0.9)")},
        {compiled: adam.format("**{'learning_rate': 0.0}")},
        {
            compiled: "        optimizer=keras.optimizers.get("
            "{'class_name': 'adam', 'config': {'learning_rate': 0.0}}),"
        },
        {compiled: "        optimizer=keras.optimizers.Adam.from_config({'learning_rate': 0.0}),"},
    ]
    trains = [
        {made: "    LR = 1e-3\n" + made, compiled: adam.format("learning_rate=LR")},
        {compiled: adam.format("learning_rate=1e-5")},
        {compiled: adam.format("learning_rate=float('1e-3'), **{'beta_1': 0.0}")},
    ]
    for changes in tiny:
        code = _solution(changes)
        steps = reading.Code.of(code).hand_steps("fit_model")
        assert steps and "compile" in steps[0][1], changes
    for changes in trains:
        code = _solution(changes)
        assert reading.Code.of(code).hand_steps("fit_model") == [], changes


def test_a_module_patched_through_a_container_or_its_namespace_is_a_module_write():
    """Red team 27a's finding 5: `mods = [hashlib]; mods[0].sha256 = f`, `d = np.__dict__;
    d["asarray"] = f` and `operator.setitem(json.__dict__, ...)` were neither module patches
    (which decide whether the probe's facts are trusted) nor unreadable; `timing.__dict__.update`
    and `object.__setattr__(timing, ...)` were patches but readable. One detection now serves
    both: every module patch is an attribute set on a module."""
    f = "def f(*a, **k):\n    return '{}'\nimport hashlib, operator\nimport numpy as np\n"
    for patch in (
        "mods = [hashlib]\nmods[0].sha256 = f",
        "ns = np.__dict__\nns['asarray'] = f",
        "operator.setitem(json.__dict__, 'dumps', f)",
        "timing.__dict__.update(compare=f)",
        "object.__setattr__(timing, 'compare', f)",
    ):
        code = _solution({ANCHOR: f"{f}{patch}\n{ANCHOR}"})
        assert reading.Code.of(code).module_patches(), patch
        _refused(code, ANCHOR, "what a module's names stand for")
    code = _solution({ANCHOR: f"{f}CONFIG = {{'np': np}}\nCONFIG['x'] = 1\n{ANCHOR}"})
    assert reading.Code.of(code).module_patches() == []
    checks.assert_readable(code)
    checks.clear_cache()


DONOR = 'p = "donor.weights.h5"\ndonor = keras.models.load_model("donor.keras")\n'
#: Red team 28a's forms (finding 4): the model reached through an expression that holds it.
HELD = {
    "tuple": "m, _ = fit_model, None\nm.set_weights(donor.get_weights())",
    "tuple1": "(m,) = (fit_model,)\nm.load_weights(p)",
    "starred": "m, *rest = [fit_model]\nm.load_weights(p)",
    "index": "m = [fit_model][0]\nm.load_weights(p)",
    "ifexp": "m = fit_model if EPOCHS else None\nm.load_weights(p)",
    "or": "m = fit_model or None\nm.load_weights(p)",
    "dict": 'd = {"m": fit_model}\nd["m"].load_weights(p)',
    "next": "m = next(iter([fit_model]))\nm.load_weights(p)",
    "lambda": "(lambda m: m.load_weights(p))(fit_model)",
    "map": "list(map(lambda m: m.load_weights(p), [fit_model]))",
    "getter": "def get():\n    return fit_model\nget().load_weights(p)",
    "namespace": "import types\n"
    "types.SimpleNamespace(m=fit_model).m.set_weights(donor.get_weights())",
    "class": "class B:\n    m = fit_model\nB.m.load_weights(p)",
    "with": "import contextlib\n"
    "with contextlib.nullcontext(fit_model) as m:\n    m.load_weights(p)",
    "copy": "import copy\ncopy.copy(fit_model).load_weights(p)",
    "zip": "for m, q in zip([fit_model], [p]):\n    m.load_weights(q)",
    "enumerate": "for i, m in enumerate([fit_model]):\n    m.load_weights(p)",
    # kin: the same rule, other spellings
    "path": "import types\nbox = types.SimpleNamespace(m=fit_model)\nm = box.m\nm.load_weights(p)",
    "values": 'for m in {"fit": fit_model}.values():\n    m.load_weights(p)',
    "walrus": "(m := (fit_model,))[0].load_weights(p)",
    "augmented": "ms = []\nms += [fit_model]\nms[0].load_weights(p)",
    "default": "def ld(m=fit_model):\n    m.load_weights(p)\nld()",
    "method": "class H:\n    def set(self, m):\n        self.m = m\n    def go(self):\n"
    "        self.m.layers[0].kernel.assign(self.m.layers[0].kernel)\nh = H()\nh.set(fit_model)\n"
    "h.go()",
    "dict kernel": 'd = {"m": fit_model}\nd["m"].layers[-1].kernel.assign_add(1.0)',
    "append": "ms = []\nms.append(fit_model)\nms[0].load_weights(p)",
    "setattr": "import types\nbox = types.SimpleNamespace()\nsetattr(box, 'm', fit_model)\n"
    "box.m.load_weights(p)",
    "yield": "def g():\n    yield fit_model\nnext(g()).load_weights(p)",
    "match": "match fit_model:\n    case m:\n        m.load_weights(p)",
    "global": "def f():\n    global g\n    g = fit_model\nf()\ng.load_weights(p)",
    "history": "h = fit_model.fit(train_ds, epochs=1, verbose=0)\nh.model.load_weights(p)",
    "callback": "fit_clock.model.set_weights(donor.get_weights())",
    "raise": "try:\n    raise ValueError(fit_model)\nexcept ValueError as e:\n"
    "    e.args[0].load_weights(p)",
    "gc": "import gc\n"
    "[o for o in gc.get_objects() if isinstance(o, keras.Model)][0].load_weights(p)",
    "output": "fit_model\n# cell\nOut[1].load_weights(p)",
    "getitem": "d = {'m': fit_model}\nm = d.__getitem__('m')\nm.load_weights(p)",
}
#: Red team 28a's writers: a variable of the model written by a scatter or a raw op by keyword.
WRITTEN = {
    "scatter_update": "for v, w in zip(fit_model.weights, donor.get_weights()):\n"
    "    v.value.scatter_update(tf.IndexedSlices(w, tf.range(w.shape[0])))",
    "scatter_nd_update": "for v, w in zip(fit_model.weights, donor.get_weights()):\n"
    "    v.value.scatter_nd_update([[i] for i in range(w.shape[0])], w)",
    "compat.v1": "for v, w in zip(fit_model.weights, donor.get_weights()):\n"
    "    tf.compat.v1.scatter_update(v.value, tf.range(w.shape[0]), w)",
    "raw_ops scatter": "for v, w in zip(fit_model.weights, donor.get_weights()):\n"
    "    tf.raw_ops.ResourceScatterUpdate(resource=v.value.handle, indices=tf.range(w.shape[0]),"
    " updates=w)",
    "layer kernel": "k = donor.layers[-1].kernel.numpy()\n"
    "fit_model.layers[-1].kernel.value.scatter_update(tf.IndexedSlices(k, tf.range(128)))",
    "raw_ops assign": "for v, w in zip(fit_model.weights, donor.get_weights()):\n"
    "    tf.raw_ops.AssignVariableOp(resource=v.handle, value=w)",
}


@pytest.mark.parametrize("form", [*HELD, *WRITTEN])
def test_what_holds_fit_model_is_fit_model_whatever_the_expression(form):
    """Red team 28a #4 (warm_tuple and warm_scatter, 12/12 with another model's weights in
    fit_model): a load through an expression that holds the model (unpacked, indexed, a
    branch, a container, a lambda's parameter, a getter's return, a class body, `with ... as`,
    a shallow copy, a loop over `zip`/`enumerate`) or a scatter or keyword raw op on its
    variables was no load (nor, of their kin, a container filled, a yield, a match, a global
    bound in a function, fit's History, a callback fit was given, an exception's arguments,
    `gc.get_objects()`, IPython's `Out`). Whatever holds the model bare (not only read an
    attribute of, nor given to a read-only builtin) holds it, and so does every name bound
    from it."""
    *cells, last = (HELD.get(form) or WRITTEN[form]).split("\n# cell\n")
    code = _solution({ANCHOR: f"{DONOR}{last}\n{ANCHOR}"}, added=tuple(cells))
    loads = reading.Code.of(code).hand_steps("fit_model", loads=True)
    assert loads and loads[0][0] == _cell_of(code, ANCHOR), (form, loads)


def test_reading_or_keeping_fit_model_beside_others_is_no_load():
    """The general rule's honest side: the model kept in a dict and only saved or evaluated
    through it, printed, tested with `isinstance`, or given to a helper that reports on it,
    loads nothing; nor does the optimizer's learning rate set through an alias."""
    honest = (
        'models = {"fit": fit_model}\nfor key, m in models.items():\n'
        '    m.save(f"/tmp/{key}.keras")\nprint(models["fit"].evaluate(test_ds, verbose=0))\n'
        "print(fit_model)\nassert isinstance(fit_model, keras.Model)\n"
        "print(len([fit_model]), type(fit_model), id(fit_model))\n"
        "def report(m):\n    print(m.evaluate(test_ds, verbose=0))\nreport(fit_model)\n"
        "m = fit_model\nm.optimizer.learning_rate.assign(1e-4)\n"
        "copy = make_model()\ncopy.set_weights(m.get_weights())"
    )
    _no_load_in_fit_model(honest)


@pytest.mark.parametrize(
    "changes",
    [
        {  # a callback made in place: `keras` is no callback, and holds nothing
            "callbacks=[fit_clock, fit_checkpoints]": (
                "callbacks=[fit_clock, fit_checkpoints, keras.callbacks.TerminateOnNaN()]"
            )
        },
        {"callbacks=[fit_clock, fit_checkpoints]": "callbacks=[fit_clock, *[fit_checkpoints]]"},
        {  # question 6 (a) restored into a clone: new layers, new weights
            "    restored_fit = make_model()": (
                "    restored_fit = keras.models.clone_model(fit_model)"
            )
        },
    ],
    ids=["inline callback", "starred callbacks", "clone"],
)
def test_honest_forms_a_red_team_found_read_as_loads_are_no_load(changes):
    """Red team 30a: an extra Keras callback written in place in `fit(callbacks=...)` made every
    name under it, `keras` too, hold fit_model, so question 6 (b)'s restore (through
    `keras.optimizers.Adam()`) read as a load into it (7/12); and question 6 (a) restored into
    `keras.models.clone_model(fit_model)`, a model with new layers and weights, read as one too.
    Only the callbacks' own names hold it, and a clone without a clone or call function does not;
    one that shares the layers still does."""
    code = _solution(changes)
    assert reading.Code.of(code).hand_steps("fit_model", loads=True) == []
    checks.clear_cache()
    shared = _solution(
        {
            "    restored_fit = make_model()": (
                "    restored_fit = keras.models.clone_model(fit_model, clone_function=lambda l: l)"
            )
        }
    )
    assert reading.Code.of(shared).hand_steps("fit_model", loads=True) != []
    checks.clear_cache()
