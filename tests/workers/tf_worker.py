"""A real MultiWorkerMirroredStrategy worker: joins the cluster, does one all-reduce, exits.

Prints the devices this worker trains on (one CPU, whatever the notebook simulated for itself) and
the sum over workers of (task index + 1), computed by a cross-worker all-reduce.
"""

import json
import os

import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
print(f"ready: replicas in sync: {strategy.num_replicas_in_sync}", flush=True)
print(f"COURSE_DEVICES={os.environ.get('COURSE_DEVICES')}", flush=True)
print(f"worker devices: {list(strategy.extended.worker_devices)}", flush=True)
value = strategy.run(lambda: tf.constant(index + 1.0))
total = strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)
print(f"all-reduce sum: {float(total)}", flush=True)
