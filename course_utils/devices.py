"""Simulate several devices on one machine, so distribution can be learned without a GPU cluster.

TensorFlow can split one physical device into several *logical* devices, and MirroredStrategy
makes each one a replica: the code is what runs on 4 real GPUs, only the speed differs (simulated
CPU devices share the same cores, and one pool of compute threads: TensorFlow gives every local
device its global intra-op thread pool unless TF_OVERRIDE_GLOBAL_THREADPOOL is set, so N devices do
not start N pools). This must happen before TensorFlow's first operation; later,
`simulate_devices` raises an error that says what to do.

Example, in a fresh kernel (before any TensorFlow op):

    from course_utils import devices

    names = devices.simulate_devices(4)  # on a CPU: '/device:CPU:0' ... '/device:CPU:3'
"""

from __future__ import annotations

from course_utils.quiet import import_tensorflow
from course_utils.settings import check_simulated_devices
from course_utils.tables import count

tf = import_tensorflow()  # `import tensorflow as tf`, without its start-up log lines

#: Memory given to each logical GPU when one physical GPU is split (MB). Small models need little.
LOGICAL_GPU_MEMORY_MB = 2048


class DeviceSetupTooLateError(RuntimeError):
    """Devices were requested after TensorFlow had already initialised them."""


def _too_late(wanted: int, kind: str, have: int) -> DeviceSetupTooLateError:
    return DeviceSetupTooLateError(
        f"Cannot set up {count(wanted, kind + ' device')}: TensorFlow already started with {have}. "
        "Logical devices can only be created before the first TensorFlow operation. "
        "Restart the kernel (Kernel > Restart Kernel, or Runtime > Restart session in Colab) "
        "and run the set-up cell first, before any other cell."
    )


def simulate_devices(count: int | None) -> list[str]:
    """Make `count` logical devices for the strategy and return their names (again: harmless).

    With GPUs, uses `count` of them (None: all), or splits a single GPU into `count` logical GPUs
    of LOGICAL_GPU_MEMORY_MB each. Without, splits the CPU into `count` (None: 2).
    """
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        return _configure_gpus(gpus, count)
    return _configure_cpus(2 if count is None else count)


def _configure_cpus(count: int) -> list[str]:
    check_simulated_devices(count)  # before any device exists: the set-up cell can run again
    cpu = tf.config.list_physical_devices("CPU")[0]
    current = tf.config.get_logical_device_configuration(cpu)
    if current is not None and len(current) == count:
        return _names("CPU")
    if count > 1 or current is not None:
        try:
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration()] * count
            )
        except RuntimeError:
            raise _too_late(count, "CPU", len(tf.config.list_logical_devices("CPU"))) from None
    names = _names("CPU")
    if len(names) != count:
        raise _too_late(count, "CPU", len(names))
    return names


def _configure_gpus(gpus: list, count: int | None) -> list[str]:
    count = len(gpus) if count is None else count
    try:
        if count <= len(gpus):
            tf.config.set_visible_devices(gpus[:count], "GPU")
        elif len(gpus) == 1:
            logical_gpu = tf.config.LogicalDeviceConfiguration(memory_limit=LOGICAL_GPU_MEMORY_MB)
            tf.config.set_logical_device_configuration(gpus[0], [logical_gpu] * count)
        else:
            raise ValueError(
                f"COURSE_DEVICES={count} but this machine has {len(gpus)} GPUs; "
                f"use at most {len(gpus)}, or unset COURSE_DEVICES to use them all."
            )
    except RuntimeError:
        names = _names("GPU")
        if len(names) == count:
            return names
        raise _too_late(count, "GPU", len(names)) from None
    return _names("GPU")


def _names(kind: str) -> list[str]:
    return [d.name for d in tf.config.list_logical_devices(kind)]
