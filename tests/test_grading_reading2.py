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

ANCHOR = 'fit_model.save(ARTIFACTS / "fit_model.keras")'


def test_weights_and_optimizer_state_loaded_into_fit_model_cost_what_a_copy_costs(tmp_path):
    """Red team 22a's lw-onedev, ckpt-model and ckpt-manager (12/12): Keras 3 saves a compiled
    model's optimizer with its weights, so `load_weights`, a `tf.train.Checkpoint` given the
    model (or its optimizer, through a dict too) then read, and a `CheckpointManager` restoring
    one bring the step count and Adam's moments with the weights. Each fails `own_model` and the
    scope point, naming the cell (a checkpoint that reaches the optimizer is read as its
    steps, red team 21a's rule, first). The solution's restore into `restored_fit` does not."""
    found = _trained_fit_model(tmp_path)
    for forged in (
        'fit_model.load_weights(ARTIFACTS / "one.weights.h5")',
        'fit_model.load_weights("/tmp/onedev.keras")',
        'keras.saving.load_weights(fit_model, "/tmp/one.weights.h5")',
        "fit_model.load_own_variables(store)",
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
        code = _solution({ANCHOR: f"{forged}\n{ANCHOR}"})
        cell = _cell_of(code, ANCHOR)
        with pytest.raises(
            checks.CheckError,
            match=rf"(loads weights and optimizer state into `fit_model`|steps the optimizer "
            rf"of `fit_model` outside fit) \(cell \[{cell}\]: ",
        ):
            checks.own_model(tmp_path, "fit_model", found, code)
        with pytest.raises(
            checks.CheckError,
            match=rf"with (weights and optimizer state loaded into it|steps of its optimizer "
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
    """The tie to `fit` itself, a run-time fact: Keras 3 builds a model's training function in
    `fit` (`train_function` stays None until then), and no loading builds it. A model graded
    as trained by `fit` whose kernel object never ran it fails `own_model`, whether its weights
    came by `set_weights` (0 steps, file and kernel agreeing: it lost only the step-count line
    before) or by `load_weights` (the other model's 8 steps and moments brought along), with
    code the reading finds nothing in. A model that ran fit passes."""
    for how, steps in (("set_weights", 0), ("load_weights", 8)):
        found = _copied_fit_model(tmp_path, how)
        fact = found["models"]["fit_model"]
        assert (fact["fit_ran"], fact["optimizer_steps"]) == (False, steps), (how, fact)
        with pytest.raises(
            checks.CheckError, match="`fit_model` in the notebook's memory never ran fit"
        ):
            checks.own_model(tmp_path, "fit_model", found, _solution())
        checks.clear_cache()
    found = _trained_fit_model(tmp_path)
    assert found["models"]["fit_model"]["fit_ran"] is True
    checks.own_model(tmp_path, "fit_model", found, _solution())
