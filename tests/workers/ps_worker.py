"""Parameter-server training with a Keras 3 custom loop: chief (coordinator), workers and ps.

The `worker` and `ps` tasks only serve (they never exit); the chief creates the variables on the
parameter servers, schedules steps on the workers with ClusterCoordinator, and prints its result.
"""

import json
import os

import tensorflow as tf

task = json.loads(os.environ["TF_CONFIG"])["task"]
resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
if task["type"] in ("worker", "ps"):
    print(f"{task['type']} {task['index']} serving", flush=True)
    server = tf.distribute.Server(
        resolver.cluster_spec(),
        job_name=task["type"],
        task_index=task["index"],
        protocol="grpc",
        start=True,
    )
    server.join()

import keras  # noqa: E402

strategy = tf.distribute.ParameterServerStrategy(resolver)
coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(0.1)
    optimizer.build(model.trainable_variables)
print(
    f"variables on: "
    f"{sorted({v.value.device.split('/device')[0] for v in model.trainable_variables})}",
    flush=True,
)


def dataset_fn():
    x = tf.random.stateless_normal((256, 4), seed=(1, 2))
    return (
        tf.data.Dataset.from_tensor_slices((x, tf.reduce_sum(x, axis=1, keepdims=True)))
        .repeat()
        .batch(32)
    )


iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))


@tf.function
def train_step(iterator):
    def step_fn(batch):
        x, y = batch
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x) - y) ** 2)
        optimizer.apply_gradients(
            zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables)
        )
        return loss

    return strategy.run(step_fn, args=(next(iterator),))


first = coordinator.schedule(train_step, args=(iterator,))
# Steps run asynchronously: without this wait a later step can run first (a worker still
# starting, closures retried), and "first loss" would then be measured on trained weights.
first_loss = float(first.fetch())
for _ in range(60):
    last = coordinator.schedule(train_step, args=(iterator,))
coordinator.join()
print(
    f"chief done: first loss {first_loss:.4f}, last loss {float(last.fetch()):.6f}",
    flush=True,
)
