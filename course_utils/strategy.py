"""Pick the distribution strategy for this machine, and build models under it correctly.

Example:
    >>> import course_utils
    >>> settings = course_utils.setup()
    >>> from course_utils.strategy import make_strategy, build_model_and_optimizer
    >>> strategy = make_strategy()  # prints "MirroredStrategy: 2 replicas ..."
    >>> model, optimizer = build_model_and_optimizer(
    ...     strategy,
    ...     make_model=lambda: keras.Sequential([...]),
    ...     make_optimizer=keras.optimizers.Adam,
    ... )
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from course_utils.devices import device_table
from course_utils.quiet import import_tensorflow

tf = import_tensorflow()  # `import tensorflow as tf`, without its start-up log lines

KINDS = ("auto", "mirrored", "default")


def make_strategy(kind: str = "auto", devices: list[str] | None = None, verbose: bool = True):
    """Return a tf.distribute strategy and print how many replicas it has.

    kind:
      "auto"     MirroredStrategy over all logical GPUs (else CPUs) when there are 2 or more,
                 otherwise the default (no-op) strategy.
      "mirrored" always MirroredStrategy, even over one device (to measure its overhead).
      "default"  the default strategy: what plain Keras uses without any `scope()`.
    devices: the logical device names to mirror over (default: all GPUs, else all CPUs).
    """
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r}: use one of {', '.join(KINDS)}.")
    if devices is None:
        devices = [d.name for d in tf.config.list_logical_devices("GPU")] or [
            d.name for d in tf.config.list_logical_devices("CPU")
        ]
    if kind == "mirrored" or (kind == "auto" and len(devices) > 1):
        strategy = tf.distribute.MirroredStrategy(devices=devices)
    else:
        strategy = tf.distribute.get_strategy()
    if verbose:
        name = type(strategy).__name__.replace("_DefaultDistributionStrategy", "default strategy")
        print(f"{name}: {strategy.num_replicas_in_sync} replica(s) in sync")
        if kind != "default":
            print(device_table(devices[: strategy.num_replicas_in_sync]))
    return strategy


def build_model_and_optimizer(
    strategy,
    make_model: Callable[[], Any],
    make_optimizer: Callable[[], Any],
) -> tuple[Any, Any]:
    """Create model and optimizer under `strategy.scope()` and build the optimizer's variables.

    Variables created under the scope become mirrored variables (one copy per replica, kept in
    sync). Building the optimizer here matters: with 2+ replicas, Adam and RMSprop otherwise
    create their slot variables inside the first distributed step and fail with
    "You must feed a value for placeholder tensor 'cond/else/...'" (SGD happens to work).
    """
    with strategy.scope():
        model = make_model()
        optimizer = make_optimizer()
        if not model.built:
            raise ValueError(
                "make_model must return a built model: give it a keras.Input(shape=...) first."
            )
        optimizer.build(model.trainable_variables)
    return model, optimizer
