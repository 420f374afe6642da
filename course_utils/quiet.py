"""Keep TensorFlow's start-up log lines out of notebook outputs.

Why this module redirects a file descriptor: some lines are printed by TensorFlow's C++ libraries
while they load, before any setting is read ("All log messages before absl::InitializeLog() ...",
"Could not find cuda drivers ...", "failed call to cuInit" without a GPU). Nothing switches those
off, so the import runs with the process's error stream (file descriptor 2, which Jupyter shows in
the cell) pointed at /dev/null. The rest has switches:

- C++ INFO/WARNING logs (oneDNN, CPU features): TF_CPP_MIN_LOG_LEVEL=2, set before the import.
- TensorFlow's Python logger at INFO ("Using MirroredStrategy with devices ..."): level ERROR;
  the notebooks print the strategy and its devices themselves.
- absl warnings from tensorflow_datasets ("Variant folder ... has no dataset_info.json" for a
  folder that was never prepared): absl verbosity ERROR.
- Keras 3.15 warns "`shuffle=True` was passed, but will be ignored" on every `fit` with a
  tf.data.Dataset (fit's default is shuffle=True); the course shuffles in the pipeline on purpose.
- TensorFlow 2.21 warns "To make it possible to preserve tf.data options across serialization
  boundaries ..." whenever a distributed dataset is iterated inside tf.function (its own
  OwnedMultiDeviceIterator calls `dataset.options()` in graph mode): nothing a student can fix.

To see everything, set TF_CPP_MIN_LOG_LEVEL=0 before the set-up cell runs (in the shell that
starts Jupyter, or `os.environ["TF_CPP_MIN_LOG_LEVEL"] = "0"` at the top of the cell).

Example:
    >>> from course_utils.quiet import import_tensorflow
    >>> tf = import_tensorflow()   # same module as `import tensorflow as tf`, minus the noise
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Iterator
from types import ModuleType

#: The warnings above, by the start of their message.
HIDDEN_WARNINGS = (
    "To make it possible to preserve tf.data options",
    "`shuffle=True` was passed, but will be ignored",
)


def set_log_environment() -> None:
    """Set the environment variables that must exist before TensorFlow is imported."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


@contextlib.contextmanager
def stderr_to_devnull() -> Iterator[None]:
    """Point file descriptor 2 at /dev/null for the block (Python exceptions still propagate)."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def import_tensorflow() -> ModuleType:
    """Import TensorFlow (and query devices once) without the start-up noise described above."""
    set_log_environment()
    if os.environ["TF_CPP_MIN_LOG_LEVEL"].strip() == "0":
        import tensorflow as tf

        return tf
    first_time = "tensorflow" not in sys.modules
    with stderr_to_devnull():
        import tensorflow as tf

        if first_time:
            # Prints the cuInit message, if any, now.
            tf.config.list_physical_devices()
    import absl.logging

    absl.logging.set_verbosity(absl.logging.ERROR)
    tf.get_logger().setLevel("ERROR")
    for message in HIDDEN_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=UserWarning)
    return tf
