"""Support package for the course on distributed training with TensorFlow and Keras.

Every notebook starts with the same set-up cell, before any TensorFlow operation:

    import course_utils

    settings = course_utils.setup()

It reads the COURSE_* variables (`settings`), keeps TensorFlow's start-up noise out of the outputs
(`quiet`), creates the devices the strategy will use (`devices`) and prints what it did. The other
modules: `data`, `timing`, `plots`, `tables` and `cluster`. The `course` command and the
instructors' tooling live in `course_tools`, which students never need to open.
"""

from __future__ import annotations

import os

from course_utils.settings import Settings, read_settings

__all__ = ["Settings", "read_settings", "setup"]
__version__ = "0.1.0"

PROFILE_NOTES = {
    "full": "Sizes: the largest, made for a GPU (each notebook picks its own).",
    "cpu": "Sizes: fewer epochs (often fewer examples) than full: minutes per notebook.",
    "quick": "Sizes: small subsets and few epochs (a test run: its numbers are not the lesson's).",
}


def setup(
    devices: int | None = None,
    profile: str | None = None,
    data: str | None = None,
    *,
    verbose: bool = True,
) -> Settings:
    """Configure this kernel for the course and return the settings in force.

    Arguments override COURSE_DEVICES, COURSE_PROFILE and COURSE_DATA. Re-running it is harmless;
    asking for other devices after TensorFlow started raises `devices.DeviceSetupTooLateError`.
    """
    from course_utils.devices import simulate_devices

    asked = read_settings(devices=devices, profile=profile, data=data)
    names = simulate_devices(asked.devices)
    gpu = any(":GPU:" in name for name in names)
    chosen = ("full" if gpu else "cpu") if asked.profile == "auto" else asked.profile
    # Written back, so that every module (e.g. data.load) and child process sees the same.
    os.environ.update(COURSE_PROFILE=chosen, COURSE_DATA=asked.data, COURSE_DEVICES=str(len(names)))
    if verbose:
        import keras
        import tensorflow as tf

        where = f"{len(names)} logical {'GPU' if gpu else 'CPU'}"
        if not gpu and len(names) > 1:
            where += " (simulated: they share this machine's cores)"
        print(f"TensorFlow {tf.__version__}, Keras {keras.__version__}")
        print(f"profile={chosen}  data={asked.data}  devices={where}")
        note = PROFILE_NOTES[chosen]
        if asked.profile == "auto":
            forces = "cpu forces the shorter run" if gpu else "full forces the larger sizes"
            note += (
                f" Chosen because {'a' if gpu else 'no'} GPU was found; COURSE_PROFILE={forces}."
            )
        print(note)
    return Settings(chosen, len(names), asked.data)
