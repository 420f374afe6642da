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
