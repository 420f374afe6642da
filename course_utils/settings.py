"""The course's three settings, read from the environment in one place.

- COURSE_PROFILE, the sizes of every run: `full` (the largest sizes, made for a GPU), `cpu`
  (fewer epochs and examples: minutes per notebook on a laptop) or `quick` (a small test run).
  Default: full with a GPU, cpu without one.
- COURSE_DEVICES, how many replicas: a whole number. Default: the machine's GPUs, or 2 CPUs.
  Simulated CPU devices: 1 to 8 (`SIMULATED_DEVICES`), the counts the course is checked at.
- COURSE_DATA, where the datasets come from: `auto` (default), `tfds` or `synthetic` (`data`).

Example:
    >>> from course_utils.settings import read_settings
    >>> read_settings({"COURSE_PROFILE": "cpu"}).pick(full=12, cpu=6, quick=2)
    6
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

PROFILES = ("full", "cpu", "quick")
DATA_SOURCES = ("auto", "tfds", "synthetic")
#: How many simulated CPU devices the course accepts: the counts the course is checked at (CI's
#: device sweep, .ci/device-sweep, runs the notebooks at them in the quick profile).
#: Physical GPUs are not limited: a machine's GPUs are all usable.
SIMULATED_DEVICES = range(1, 9)


class SettingsError(ValueError):
    """A COURSE_* variable has a value the course does not understand."""


@dataclass(frozen=True)
class Settings:
    """What this run does. Until `course_utils.setup()` resolves them, `profile` may be "auto"
    and `devices` None (the defaults above)."""

    profile: str = "auto"
    devices: int | None = None
    data: str = "auto"

    def pick(self, *, full: T, quick: T, cpu: T | None = None) -> T:
        """The value for this profile: `EPOCHS = settings.pick(full=12, cpu=6, quick=3)`.
        Without `cpu`, the cpu profile gets the `full` value; so does "auto"."""
        if self.profile == "quick":
            return quick
        return cpu if self.profile == "cpu" and cpu is not None else full


def read_settings(
    environ: Mapping[str, str] | None = None,
    *,
    profile: str | None = None,
    devices: int | str | None = None,
    data: str | None = None,
) -> Settings:
    """Read COURSE_PROFILE, COURSE_DEVICES and COURSE_DATA; keyword arguments win over them.
    A wrong value raises SettingsError, which lists the accepted ones."""
    env = os.environ if environ is None else environ

    def value(name: str, given: object) -> str:
        return str(env.get(f"COURSE_{name}", "") if given is None else given).strip().lower()

    profile, data = value("PROFILE", profile) or "auto", value("DATA", data) or "auto"
    devices = value("DEVICES", devices)
    if profile not in (*PROFILES, "auto"):
        raise SettingsError(
            f"COURSE_PROFILE={profile!r} is not one of {', '.join(PROFILES)} (or auto: full "
            "with a GPU, cpu without)."
        )
    if data not in DATA_SOURCES:
        raise SettingsError(f"COURSE_DATA={data!r} is not one of {', '.join(DATA_SOURCES)}.")
    if devices and not (devices.isdigit() and int(devices) >= 1):
        raise SettingsError(f"COURSE_DEVICES={devices!r}: give a whole number, at least 1.")
    return Settings(profile, int(devices) if devices else None, data)


def check_simulated_devices(count: int) -> int:
    """`count` if the course is checked with that many simulated CPU devices, else SettingsError.

    Called by `course_utils.setup()` before TensorFlow starts, so a wrong count costs no restart:

        >>> check_simulated_devices(8)
        8
    """
    low, high = SIMULATED_DEVICES[0], SIMULATED_DEVICES[-1]
    if count not in SIMULATED_DEVICES:
        raise SettingsError(
            f"COURSE_DEVICES={count}: simulate {low} to {high} CPU devices, the counts the course "
            f"is checked at; with more, runs can fail (a quick-profile test set can be smaller "
            f"than one global batch, and Keras's fit and evaluate stop on a first batch that does "
            f"not split into equal slices per replica). Set it to a number from {low} to {high} "
            f'(os.environ["COURSE_DEVICES"] = "{high}" in the set-up cell, after its import os and '
            f"before course_utils.setup(), or in the shell that starts Jupyter) and run the set-up "
            f"cell again."
        )
    return count


def tfds_data_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where tensorflow-datasets keeps its datasets: TFDS_DATA_DIR, else its default
    ~/tensorflow_datasets (tensorflow_datasets.core.constants; read without importing tfds)."""
    env = os.environ if environ is None else environ
    return Path(env.get("TFDS_DATA_DIR") or Path.home() / "tensorflow_datasets")
