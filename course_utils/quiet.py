"""Keep TensorFlow's log lines out of notebook outputs: `import_tensorflow`.

TensorFlow's C++ libraries print some lines while they load, before any setting is read ("All
log messages before absl::InitializeLog() ...", "failed call to cuInit" without a GPU), so the
import runs with file descriptor 2 (the cell's error stream) pointed at /dev/null. Switched off
too: C++ INFO and WARNING logs (TF_CPP_MIN_LOG_LEVEL=2), TensorFlow's and absl's Python logs
below ERROR, and the two warnings in HIDDEN_WARNINGS (TensorFlow's own, and fit's default
shuffle=True on a dataset, which `fit(..., shuffle=False)` would avoid). The C++
lines hidden include tf.data's notes on the input pipeline ("Input of
GeneratorDatasetOp::Dataset will not be optimized ...", from the multi-device iterator a
strategy reads its input with) and its warning "The calling iterator did not fully read the
dataset being cached" (an iterator dropped early over an unfilled `cache()`: what it wrote is
discarded and the next pass writes the cache again; a cache completed short, appendix B's bug,
logs nothing at WARNING). TensorFlow has no switch for one C++ warning alone, so appendix B
names that one where it teaches the cache (parts 1 and 5). To see everything, set
TF_CPP_MIN_LOG_LEVEL=0 before the set-up cell runs.

Example:

    from course_utils.quiet import import_tensorflow

    tf = import_tensorflow()  # the module `import tensorflow as tf` gives, minus the noise
"""

from __future__ import annotations

import os
import sys
import warnings
from types import ModuleType

HIDDEN_WARNINGS = (
    # TensorFlow 2.21, whenever a distributed dataset is iterated inside tf.function: its own
    # OwnedMultiDeviceIterator calls `dataset.options()` in graph mode.
    "To make it possible to preserve tf.data options",
    # Keras 3.15, on every `fit` with a tf.data.Dataset (fit's default is shuffle=True): the
    # course shuffles in the pipeline on purpose.
    "`shuffle=True` was passed, but will be ignored",
)


def import_tensorflow() -> ModuleType:
    """Import TensorFlow (and list its devices once) without the start-up noise."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # read when TensorFlow loads
    if os.environ["TF_CPP_MIN_LOG_LEVEL"].strip() == "0":
        import tensorflow as tf

        return tf
    first_time = "tensorflow" not in sys.modules
    sys.stderr.flush()
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        import tensorflow as tf

        if first_time:
            # Prints the cuInit message, if any, now.
            tf.config.list_physical_devices()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
    import absl.logging

    absl.logging.set_verbosity(absl.logging.ERROR)
    tf.get_logger().setLevel("ERROR")
    for message in HIDDEN_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=UserWarning)
    return tf
