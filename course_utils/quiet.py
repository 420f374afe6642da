"""Keep TensorFlow's start-up log lines out of notebook outputs.

Students should only see output that teaches something. TensorFlow 2.21 prints several lines
that don't, and each needs its own switch:

- C++ INFO/WARNING logs (oneDNN notice, CPU-feature notice, ...): `TF_CPP_MIN_LOG_LEVEL=2`,
  which must be set before TensorFlow is imported.
- Lines printed by static initialisers while the shared libraries load, *before* the C++ log
  level is read ("All log messages before absl::InitializeLog() ...", "Could not find cuda
  drivers ..."), and "failed call to cuInit" when CUDA libraries exist but no GPU does: nothing
  switches these off, so the import and the first device query run with the process's stderr
  (file descriptor 2, which Jupyter shows in the cell) pointed at /dev/null.
- TensorFlow's Python logger at INFO ("Using MirroredStrategy with devices ..."): level ERROR;
  the course prints the strategy and its devices itself.
- Keras 3.15 warns "`shuffle=True` was passed, but will be ignored" on every `fit` with a
  tf.data.Dataset, because `fit`'s default is shuffle=True: the course shuffles in the pipeline
  on purpose, so that warning is filtered.
- TensorFlow 2.21 warns "To make it possible to preserve tf.data options across serialization
  boundaries ..." whenever a distributed dataset is iterated inside tf.function (its own
  OwnedMultiDeviceIterator calls `dataset.options()` in graph mode): nothing a student can fix.
- Python-side absl warnings from tensorflow_datasets ("Variant folder ... has no
  dataset_info.json" when a dataset folder exists but was never prepared): absl verbosity ERROR.

To see all of it (when something fails and TensorFlow's own messages would help), set
`TF_CPP_MIN_LOG_LEVEL=0` before the set-up cell runs, e.g. `os.environ["TF_CPP_MIN_LOG_LEVEL"] =
"0"` at the top of it, or in the shell that starts Jupyter: then nothing above is silenced.

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


def set_log_environment() -> None:
    """Set the environment variables that must exist before TensorFlow is imported."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def wants_all_logs() -> bool:
    """Whether the user asked for every log line (TF_CPP_MIN_LOG_LEVEL=0): then hide nothing."""
    return os.environ.get("TF_CPP_MIN_LOG_LEVEL", "").strip() == "0"


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
    first_time = "tensorflow" not in sys.modules
    set_log_environment()
    if wants_all_logs():
        import tensorflow as tf

        return tf
    with stderr_to_devnull():
        import tensorflow as tf

        if first_time:
            tf.config.list_physical_devices()  # triggers the cuInit message, if any, now
    import absl.logging

    absl.logging.set_verbosity(absl.logging.ERROR)
    tf.get_logger().setLevel("ERROR")
    warnings.filterwarnings(
        "ignore", message="To make it possible to preserve tf.data options", category=UserWarning
    )
    warnings.filterwarnings(
        "ignore", message="`shuffle=True` was passed, but will be ignored", category=UserWarning
    )
    return tf
