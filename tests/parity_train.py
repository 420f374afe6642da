"""Train a tiny model for a few steps in several ways and save the final weights (parity tests).

Run in a fresh process, because simulated devices are fixed when TensorFlow starts:

    COURSE_DEVICES=4 python tests/parity_train.py weights_4.npz

tests/test_parity.py runs this with COURSE_DEVICES=1, 2 and 4 and compares the files: the same
code must give the same weights whatever the number of replicas.

Every run uses the same data in the same order, the same initial weights, L2 regularization on
both kernels, and a data set whose last batch does not split evenly between replicas:
UNEVEN_EXAMPLES = 16 + 16 + 7, so the last global batch of 7 goes 4+3 on 2 replicas and
2+2+2+1 on 4. The runs (keys of the .npz file are "<run>.<weight index>"):

  fit             Model.fit with a loss averaged over the GLOBAL batch of each step
                  (`global_batch_mean`): exact parity expected.
  loop            custom loop, per-example loss divided by the step's global batch size
                  (`replica_loss`, the lines notebook 2 teaches): exact parity expected.
  loop_adam       the same loop with Adam (needs the optimizer built under the scope).
  wrong_mean      custom loop with `reduce_mean` per replica: the classic mistake.
  builtin_uneven  Model.fit with Keras's built-in loss reduction on the uneven data set.
  builtin_even    the same on EVEN_EXAMPLES = 16 + 16 + 8 (the last batch splits evenly).
"""

from __future__ import annotations

import sys

import numpy as np

import course_utils

settings = course_utils.setup(verbose=False)  # COURSE_DEVICES=N simulated devices, before any TF op

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

GLOBAL_BATCH = 16
UNEVEN_EXAMPLES = 2 * GLOBAL_BATCH + 7
EVEN_EXAMPLES = 2 * GLOBAL_BATCH + 8
EPOCHS = 2  # 3 steps per epoch: 6 steps, two of them on the short last batch
FEATURES, CLASSES = 5, 3
L2 = 0.01


def make_dataset(num_examples: int):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(num_examples, FEATURES)).astype("float32")
    y = rng.integers(0, CLASSES, size=num_examples)
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)  # no shuffle: same order


def make_model():
    keras.utils.set_random_seed(1)  # same initial weights in every run
    return keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.Dense(8, activation="relu", kernel_regularizer=keras.regularizers.L2(L2)),
            keras.layers.Dense(CLASSES, kernel_regularizer=keras.regularizers.L2(L2)),
        ]
    )


def sgd():
    return keras.optimizers.SGD(learning_rate=0.1, momentum=0.9)


def adam():
    return keras.optimizers.Adam(learning_rate=0.01)


per_example_loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)


def examples_this_step(labels):
    """The step's examples on all replicas (an all-reduce), as notebook 2 counts them."""
    local = tf.shape(labels)[0]
    context = tf.distribute.get_replica_context()
    return local if context is None else context.all_reduce("sum", local)


def build(strategy, make_optimizer):
    """Model and optimizer under the scope, the optimizer built there (Adam needs it)."""
    with strategy.scope():
        model = make_model()
        optimizer = make_optimizer()
        optimizer.build(model.trainable_variables)
    return model, optimizer


def global_batch_mean(y_true, y_pred):
    """A Model.fit loss: summed per-example loss / the step's global batch (not per replica)."""
    losses = per_example_loss(y_true, y_pred)
    return tf.nn.compute_average_loss(losses, global_batch_size=examples_this_step(y_true))


def run_fit(strategy, loss, num_examples: int, make_optimizer=sgd):
    model, optimizer = build(strategy, make_optimizer)
    with strategy.scope():
        model.compile(optimizer=optimizer, loss=loss)
    model.fit(make_dataset(num_examples), epochs=EPOCHS, shuffle=False, verbose=0)
    return model.get_weights()


def replica_loss(labels, per_example_loss, regularization_losses):
    """One replica's loss, as notebook 2 writes it: the sum over replicas is the global mean."""
    loss = tf.nn.compute_average_loss(
        per_example_loss, global_batch_size=examples_this_step(labels)
    )
    return loss + tf.nn.scale_regularization_loss(tf.add_n(regularization_losses))


def run_loop(strategy, make_optimizer=sgd, *, wrong_mean: bool = False):
    model, optimizer = build(strategy, make_optimizer)

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            losses = per_example_loss(y, model(x, training=True))
            if wrong_mean:  # the mistake: each replica averages over its own examples only
                loss = tf.reduce_mean(losses) + tf.add_n(model.losses)
            else:
                loss = replica_loss(y, losses, model.losses)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))  # sums across replicas
        return loss

    @tf.function
    def train_step(batch):
        per_replica = strategy.run(replica_step, args=batch)
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    dataset = strategy.experimental_distribute_dataset(make_dataset(UNEVEN_EXAMPLES))
    for _ in range(EPOCHS):
        for batch in dataset:
            train_step(batch)
    return model.get_weights()


def main(out_path: str) -> None:
    strategy = tf.distribute.MirroredStrategy()  # every simulated device (1, 2 or 4)
    builtin = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    runs = {
        "fit": run_fit(strategy, global_batch_mean, UNEVEN_EXAMPLES),
        "loop": run_loop(strategy),
        "loop_adam": run_loop(strategy, make_optimizer=adam),
        "wrong_mean": run_loop(strategy, wrong_mean=True),
        "builtin_uneven": run_fit(strategy, builtin, UNEVEN_EXAMPLES),
        "builtin_even": run_fit(strategy, builtin, EVEN_EXAMPLES),
    }
    arrays = {f"{run}.{i}": w for run, weights in runs.items() for i, w in enumerate(weights)}
    arrays["replicas"] = np.array(strategy.num_replicas_in_sync)
    np.savez(out_path, **arrays)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: COURSE_DEVICES=N python tests/parity_train.py OUT.npz")
    main(sys.argv[1])
