"""Support package for the course on distributed training with TensorFlow and Keras.

Every notebook starts with the same set-up cell:

    >>> import course_utils
    >>> settings = course_utils.setup()

`setup` reads the COURSE_* variables (see `course_utils.settings`), keeps TensorFlow's start-up
noise out of the outputs (`course_utils.quiet`), creates the logical devices the strategy will
use (`course_utils.devices`) and prints what it did. It must run before any TensorFlow operation.

The other modules, one idea each: `data` (datasets, online or off), `strategy` (pick a strategy,
build models under it), `losses` (loss scaling in custom loops), `timing` (speed measurements),
`plots` (learning curves), `cluster` (local multi-worker clusters). Instructor and CI tooling
(the `course` command, headless runs, the benchmark report, the exercise generator, grading)
lives apart, in `course_utils.tools`, which students never need to open.
"""

from __future__ import annotations

from course_utils.quiet import set_log_environment

set_log_environment()  # before anything imports TensorFlow

from course_utils.settings import Settings, read_settings  # noqa: E402

__all__ = ["TESTED", "Settings", "read_settings", "setup", "untested_versions"]
__version__ = "0.1.0"

#: The versions the course is tested with: constraints.txt locally, Colab's runtime in CI.
TESTED = {"Python": ("3.10", "3.13"), "TensorFlow": ("2.20", "2.21"), "Keras": ("3.13", "3.15")}


#: One line under the settings, saying what the profile's sizes are for.
PROFILE_NOTES = {
    "full": "Sizes: the original course's (made for a GPU).",
    "cpu": "Sizes: fewer epochs than the original course, so each notebook takes minutes on a CPU.",
    "quick": "Sizes: small subsets and few epochs (a test run: accuracies stay low).",
}
#: Why an unset COURSE_PROFILE became full or cpu (key: a GPU was found), and how to force one.
CHOICE_NOTES = {
    True: "Chosen because TensorFlow sees a GPU; COURSE_PROFILE=cpu forces the shorter run.",
    False: "Chosen because there is no GPU; COURSE_PROFILE=full forces the original sizes.",
}


def untested_versions(versions: dict[str, str]) -> list[str]:
    """The "name version" of each entry outside TESTED (compared on major.minor).

    >>> untested_versions({"Python": "3.13.1", "TensorFlow": "2.22.0", "Keras": "3.15.1"})
    ['TensorFlow 2.22.0']
    """

    def major_minor(version: str) -> tuple[int, int]:
        major, minor = version.split(".")[:2]
        return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)

    return [
        f"{name} {version}"
        for name, version in versions.items()
        if not major_minor(TESTED[name][0]) <= major_minor(version) <= major_minor(TESTED[name][1])
    ]


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
    has_gpu = any(":GPU:" in name for name in names)
    chosen = settings.profile == "auto"
    settings = Settings(profile=settings.profile, devices=len(names), data=settings.data)
    settings = settings.for_hardware(has_gpu)
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
        shared = " (simulated: they share this machine's cores)"
        shared = shared if kind == "CPU" and len(names) > 1 else ""
        print(f"TensorFlow {tf.__version__}, Keras {keras.__version__}")
        print(
            f"profile={settings.profile}  data={settings.data}  "
            f"devices={len(names)} logical {kind}{shared}"
        )
        print(PROFILE_NOTES[settings.profile] + (" " + CHOICE_NOTES[has_gpu] if chosen else ""))
        python = "{}.{}.{}".format(*sys.version_info[:3])
        untested = untested_versions(
            {"Python": python, "TensorFlow": tf.__version__, "Keras": keras.__version__}
        )
        if untested:
            tested = ", ".join(f"{name} {low}-{high}" for name, (low, high) in TESTED.items())
            print(
                f"Note: {', '.join(untested)} is outside what the course is tested with "
                f"({tested}); it may work, and if something fails, those versions will."
            )
    return settings
