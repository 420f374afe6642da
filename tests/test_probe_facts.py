"""The probe's facts about a model's optimizer: the one whose steps are read must be the one the
model was compiled with under the strategy, not another model's given to it afterwards.

Red team 18a trained `one_device` without a strategy, copied its weights into a `fit_model` made
under MirroredStrategy's scope and then gave it `one_device`'s optimizer (`fit_model.optimizer =
...`, `fit_model.compile(optimizer=...)`, a LossScaleOptimizer's `inner_optimizer = ...`): the
step count read was then the one-device model's, equal to its file's. An optimizer made under the
strategy keeps its step counter as a variable mirrored over the strategy's replicas; one made
outside any strategy keeps a plain variable.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from course_tools.grade.core import probe


def _model(optimizer=None) -> keras.Model:
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    model.compile(optimizer=optimizer or keras.optimizers.Adam(), loss="mse")
    return model


def _fit(model: keras.Model) -> keras.Model:
    rng = np.random.default_rng(0)
    x, y = rng.random((32, 4)).astype("float32"), rng.random((32, 3)).astype("float32")
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    return model


def _fact(model: keras.Model) -> dict:
    return probe.collect({"fit_model": model}, models=["fit_model"])["models"]["fit_model"]


@pytest.fixture(scope="module")
def strategy():
    return tf.distribute.MirroredStrategy()


@pytest.mark.parametrize("wrapped", [False, True], ids=["adam", "loss-scale"])
def test_an_optimizer_made_under_the_strategy_counts_over_its_replicas(strategy, wrapped):
    """Compiled under the scope (Adam, or Keras's LossScaleOptimizer around one, whose inner
    optimizer is read), the step counter is mirrored over every replica; compiled without a
    strategy, it is a plain variable (0 replicas); a model never compiled has no optimizer."""

    def optimizer():
        adam = keras.optimizers.Adam()
        return keras.optimizers.LossScaleOptimizer(adam) if wrapped else adam

    with strategy.scope():
        scoped = _model(optimizer())
    one_device = _fit(_model(optimizer()))
    _fit(scoped)
    fact = _fact(scoped)
    assert fact["optimizer_steps"] == 4
    assert fact["optimizer_replicas"] == strategy.num_replicas_in_sync
    assert _fact(one_device)["optimizer_replicas"] == 0
    assert probe.answer({"models": {"fit_model": fact}})  # builtin values only
    never_compiled = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    assert "optimizer_replicas" not in _fact(never_compiled)


@pytest.mark.parametrize("swap", ["assign", "compile", "inner"])
def test_another_models_optimizer_given_to_a_scoped_model_is_not_the_strategys(strategy, swap):
    """Red team 18a's opt-swap, compile-swap and lso-inner: the scoped model's optimizer replaced
    by the one-device model's. Its step count then equals the one-device model's (the old tie
    passed), but its counter is a plain variable: 0 replicas, where the scope's are mirrored."""
    one_device = _fit(_model())
    inner = swap == "inner"
    with strategy.scope():
        adam = keras.optimizers.Adam()
        fit_model = _model(keras.optimizers.LossScaleOptimizer(adam) if inner else adam)
    fit_model.set_weights(one_device.get_weights())
    assert _fact(fit_model)["optimizer_replicas"] == strategy.num_replicas_in_sync
    if swap == "assign":
        fit_model.optimizer = one_device.optimizer
    elif swap == "compile":
        fit_model.compile(optimizer=one_device.optimizer, loss="mse")
    else:
        fit_model.optimizer.inner_optimizer = one_device.optimizer
    fact = _fact(fit_model)
    assert fact["optimizer_steps"] == 4  # the one-device model's steps
    assert fact["optimizer_replicas"] == 0


def test_a_step_counter_of_the_notebooks_own_class_is_not_read_as_distributed(strategy):
    """A counter whose class is the notebook's (one that answers `value` with another model's
    mirrored counter) is not Keras's own variable: 0 replicas, whatever it answers."""
    with strategy.scope():
        scoped = _fit(_model())
    one_device = _fit(_model())
    mirrored = scoped.optimizer.iterations

    class Forged(keras.Variable):
        value = property(lambda self: mirrored.value)

    counter = one_device.optimizer.iterations
    counter.__class__ = Forged
    assert counter.value is mirrored.value
    assert _fact(one_device)["optimizer_replicas"] == 0


@pytest.mark.parametrize("swap", ["none", "assign", "compile", "inner"])
def test_a_model_given_another_models_optimizer_is_not_the_model_trained(strategy, swap, tmp_path):
    """The checks on those facts: a scoped `fit_model` with the one-device model's weights and
    optimizer (red team 18a) passes the weights and step-count tie, and now fails both the
    model's own check (`own_model`: q2's, q4's, q6's points) and the scope check, saying its
    optimizer was not made with it. The model that trained under the scope, and the one-device
    baseline with its own optimizer, pass."""
    from course_tools.grade.core import checks

    replicas = strategy.num_replicas_in_sync
    if swap == "none":  # the honest run
        with strategy.scope():
            fit_model = _model()
        _fit(fit_model).save(tmp_path / "fit_model.keras")
        baseline = _fit(_model())
        baseline.save(tmp_path / "single_model.keras")
        checks.clear_cache()
        checks.own_model(tmp_path, "fit_model", {"models": {"fit_model": _fact(fit_model)}})
        checks.assert_mirrored({"models": {"fit_model": _fact(fit_model)}}, "fit_model", replicas)
        checks.own_model(tmp_path, "single_model", {"models": {"single_model": _fact(baseline)}})
        checks.clear_cache()
        return
    one_device = _fit(_model())
    one_device.save(tmp_path / "fit_model.keras")
    with strategy.scope():
        adam = keras.optimizers.Adam()
        fit_model = _model(keras.optimizers.LossScaleOptimizer(adam) if swap == "inner" else adam)
    fit_model.set_weights(one_device.get_weights())
    if swap == "assign":
        fit_model.optimizer = one_device.optimizer
    elif swap == "compile":
        fit_model.compile(optimizer=one_device.optimizer, loss="mse")
    else:
        fit_model.optimizer.inner_optimizer = one_device.optimizer
    found = {"models": {"fit_model": _fact(fit_model)}}
    checks.clear_cache()
    made = (
        rf"the optimizer of `fit_model` in the notebook's memory was not made with it: its "
        rf"variables are mirrored over {replicas} devices?, but its optimizer was made outside "
        r"any strategy"
    )
    with pytest.raises(checks.CheckError, match=made):
        checks.own_model(tmp_path, "fit_model", found)
    with pytest.raises(checks.CheckError, match=made):
        checks.assert_mirrored(found, "fit_model", replicas)
    checks.clear_cache()


@pytest.mark.parametrize(
    "make",
    [
        keras.optimizers.Adam,
        keras.optimizers.AdamW,
        lambda: keras.optimizers.SGD(momentum=0.9),
        lambda: keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam()),
    ],
    ids=["adam", "adamw", "sgd-momentum", "loss-scale"],
)
def test_steps_of_zero_gradients_leave_every_moment_zero_and_cost_the_model(
    strategy, make, tmp_path
):
    """Red team 19a's zero-steps: a scoped model given another model's weights, its own
    optimizer stepped with zero gradients until its count is the file's, passed the step-count
    tie. Such steps leave every moment of Adam (and of its kin) exactly 0, where real steps do
    not: the probe reads it from the optimizer's public `variables`, and `own_model` fails
    saying so. A model trained by `fit` passes; SGD without momentum keeps no moment, so
    nothing is read."""
    from course_tools.grade.core import checks

    with strategy.scope():
        trained = _model(make())
    _fit(trained)
    assert _fact(trained)["moments_zero"] is False
    one_device = _fit(_model())
    with strategy.scope():
        idle = _model(make())
        idle.optimizer.build(idle.trainable_variables)
    idle.set_weights(one_device.get_weights())

    @tf.function
    def step():
        strategy.run(
            lambda: idle.optimizer.apply_gradients(
                [(tf.zeros_like(v), v) for v in idle.trainable_variables]
            )
        )

    for _ in range(4):
        step()
    idle.save(tmp_path / "fit_model.keras")
    fact = _fact(idle)
    assert fact["optimizer_steps"] == 4 and fact["moments_zero"] is True
    checks.clear_cache()
    with pytest.raises(checks.CheckError, match=r"made 4 optimizer steps, but every moment"):
        checks.own_model(tmp_path, "fit_model", {"models": {"fit_model": fact}})
    trained.save(tmp_path / "fit_model.keras")
    checks.clear_cache()
    checks.own_model(tmp_path, "fit_model", {"models": {"fit_model": _fact(trained)}})
    checks.clear_cache()
    assert "moments_zero" not in _fact(_fit(_model(keras.optimizers.SGD())))
