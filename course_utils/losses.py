"""Loss scaling for custom training loops under a strategy.

Each replica computes gradients on its share of the global batch, and the strategy SUMS the
gradients across replicas. So each replica must divide its summed per-example loss by the
GLOBAL batch size (not its own batch size, and not with `reduce_mean`): the sum over replicas
is then exactly the mean over the global batch, as on one device.

The last batch of an epoch is usually smaller, and is split unevenly between replicas. Dividing
by the constant GLOBAL_BATCH then still gives the same update for any number of replicas, but
weighs that step less than one device would; dividing by the step's real global count
(`step_global_batch_size`) matches one device exactly.

Example:
    >>> loss_fn = keras.losses.SparseCategoricalCrossentropy(reduction=None)  # loss per example
    >>> def replica_loss(labels, logits):       # called inside strategy.run
    ...     per_example = loss_fn(labels, logits)
    ...     return scaled_loss(per_example, step_global_batch_size(labels), model.losses)
"""

from __future__ import annotations

from collections.abc import Sequence

from course_utils.quiet import import_tensorflow

tf = import_tensorflow()  # `import tensorflow as tf`, without its start-up log lines


def step_global_batch_size(labels):
    """Examples in this step on all replicas together: an all-reduce of each replica's batch size.

    Inside `strategy.run` it sums the replicas' shares (so it sees the smaller last batch);
    outside any replica context it is just this batch's size.
    """
    local = tf.shape(labels)[0]
    context = tf.distribute.get_replica_context()
    return local if context is None else context.all_reduce(tf.distribute.ReduceOp.SUM, local)


def scaled_loss(per_example_loss, global_batch_size, regularization_losses: Sequence | None = None):
    """Per-replica loss whose sum over replicas equals the single-device mean loss.

    per_example_loss: shape (batch,), or (batch, ...) for multi-dimensional labels (e.g. one loss
        per pixel). tf.nn.compute_average_loss would SUM the extra axes and divide only by the
        batch size, so they are averaged here first: one number per example.
    global_batch_size: examples in the step on all replicas: `step_global_batch_size(labels)`,
        or the constant per-replica batch x `strategy.num_replicas_in_sync`.
    regularization_losses: e.g. `model.losses` (L2 penalties); their sum is divided by the number
        of replicas, because every replica adds it and the gradients are summed.
    """
    per_example_loss = tf.convert_to_tensor(per_example_loss)
    if per_example_loss.shape.rank > 1:
        per_example_loss = tf.reduce_mean(
            per_example_loss, axis=list(range(1, per_example_loss.shape.rank))
        )
    loss = tf.nn.compute_average_loss(per_example_loss, global_batch_size=global_batch_size)
    if regularization_losses:
        loss += tf.nn.scale_regularization_loss(tf.add_n(list(regularization_losses)))
    return loss
