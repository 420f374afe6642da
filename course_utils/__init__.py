"""Support package for the course on distributed training with TensorFlow and Keras.

Every notebook starts with the same set-up cell:

    >>> import course_utils
    >>> settings = course_utils.setup()

`setup` reads the COURSE_* variables (see `course_utils.settings`), keeps TensorFlow's start-up
noise out of the outputs (`course_utils.quiet`), creates the logical devices the strategy will
use (`course_utils.devices`) and prints what it did. It must run before any TensorFlow operation.

The other modules, one idea each: `data` (datasets, online or off), `strategy` (pick a strategy,
build models under it), `losses` (loss scaling in custom loops), `timing` (speed measurements),
`plots` (learning curves), `cluster` (local multi-worker clusters), `notebooks` (headless
execution), `exercise`, `checks` and `grading` (the SVHN exercise: generator, hidden-check helpers, grader), `bench` (the benchmark), `cli` (the `course` command).
"""

from __future__ import annotations

from course_utils.quiet import set_log_environment

set_log_environment()  # before anything imports TensorFlow

from course_utils.settings import Settings, read_settings  # noqa: E402

__all__ = ["Settings", "read_settings", "setup"]
__version__ = "0.1.0"


def setup(
    devices: int | None = None,
    profile: str | None = None,
    data: str | None = None,
    verbose: bool = True,
) -> Settings:
    """Configure this kernel for the course and return the settings in force.

    Arguments override COURSE_DEVICES, COURSE_PROFILE and COURSE_DATA. Re-running it with the
    same devices is harmless; asking for other devices after TensorFlow started raises
    `devices.DeviceSetupTooLateError`, which says to restart the kernel.
    """
    import os
    import sys

    from course_utils.devices import simulate_devices

    # Jupyter started as .venv/bin/jupyter (not activated) has no .venv/bin on PATH, and then
    # `%tensorboard` cannot find the tensorboard program installed next to this Python.
    scripts = os.path.dirname(sys.executable)
    if scripts not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = scripts + os.pathsep + os.environ.get("PATH", "")

    settings = read_settings(devices=devices, profile=profile, data=data)
    names = simulate_devices(settings.devices)
    settings = Settings(profile=settings.profile, devices=len(names), data=settings.data)
    # Write the settings back, so every module (e.g. data.load) and child process sees the same.
    os.environ.update(
        COURSE_PROFILE=settings.profile,
        COURSE_DATA=settings.data,
        COURSE_DEVICES=str(settings.devices),
    )
    if verbose:
        import keras
        import tensorflow as tf

        kind = "GPU" if any(":GPU:" in n for n in names) else "CPU"
        shared = (
            " (simulated: they share this machine's cores)"
            if kind == "CPU" and len(names) > 1
            else ""
        )
        print(f"TensorFlow {tf.__version__}, Keras {keras.__version__}")
        print(
            f"profile={settings.profile}  data={settings.data}  devices={len(names)} logical {kind}{shared}"
        )
    return settings
