"""The course's three settings, read from the environment in one place.

| variable         | values                     | default                                   |
|------------------|----------------------------|-------------------------------------------|
| `COURSE_PROFILE` | `full`, `cpu`, `quick`     | `full` with a GPU, `cpu` without one      |
| `COURSE_DEVICES` | a whole number >= 1        | the machine's GPUs, or 2 simulated CPUs   |
| `COURSE_DATA`    | `auto`, `tfds`, `synthetic`| `auto`                                    |

The profile sets the sizes (examples, epochs) of every run:
  full   the original course's sizes, made for a GPU (e.g. 12 epochs of MNIST);
  cpu    the same lessons with fewer epochs, and fewer examples where a notebook loads them with
         data.load (CPU_EXAMPLES), so that each notebook takes minutes on a laptop CPU;
  quick  small subsets and 2-3 epochs, for tests and `course run`.
Unset (or `auto`), the set-up cell picks `full` when TensorFlow sees a GPU and `cpu` otherwise,
and says so; set COURSE_PROFILE to force one.

Example:
    >>> from course_utils.settings import read_settings
    >>> s = read_settings({"COURSE_PROFILE": "quick"})
    >>> s.profile, s.pick(full=12, quick=2)
    ('quick', 2)
    >>> read_settings({"COURSE_PROFILE": "cpu"}).pick(full=12, cpu=6, quick=2)
    6
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

PROFILES = ("full", "cpu", "quick")
AUTO = "auto"  # COURSE_PROFILE unset: `full` with a GPU, `cpu` without (see `for_hardware`)
DATA_SOURCES = ("auto", "tfds", "synthetic")


class SettingsError(ValueError):
    """A COURSE_* variable has a value the course does not understand."""


@dataclass(frozen=True)
class Settings:
    """What the notebooks and tests should do on this run.

    `devices` is None when COURSE_DEVICES is unset: `course_utils.setup()` then picks
    the machine's GPUs, or simulates 2 CPU devices when there is no GPU. `profile` is "auto"
    until `for_hardware` (called by `course_utils.setup()`) chooses between full and cpu.
    """

    profile: str = AUTO
    devices: int | None = None
    data: str = "auto"

    @property
    def quick(self) -> bool:
        return self.profile == "quick"

    def pick(self, *, full: T, quick: T, cpu: T | None = None) -> T:
        """The value for this profile: `EPOCHS = settings.pick(full=12, cpu=6, quick=3)`.

        Without `cpu`, the cpu profile gets the `full` value; "auto" (not yet resolved) is full.
        """
        if self.quick:
            return quick
        if self.profile == "cpu" and cpu is not None:
            return cpu
        return full

    def for_hardware(self, has_gpu: bool) -> Settings:
        """These settings with an "auto" profile resolved: full with a GPU, cpu without."""
        if self.profile != AUTO:
            return self
        return replace(self, profile="full" if has_gpu else "cpu")


def read_settings(
    environ: Mapping[str, str] | None = None,
    *,
    profile: str | None = None,
    devices: int | str | None = None,
    data: str | None = None,
) -> Settings:
    """Read COURSE_PROFILE, COURSE_DEVICES and COURSE_DATA; keyword arguments win over them.

    Raises SettingsError with the accepted values when one is wrong.
    """
    env = os.environ if environ is None else environ

    overrides = {"profile": profile, "devices": devices, "data": data}

    def value(name: str) -> str:
        given = overrides[name]
        return str(env.get(f"COURSE_{name.upper()}", "") if given is None else given).strip()

    profile = value("profile").lower() or AUTO
    data = value("data").lower() or "auto"
    devices = value("devices")
    if profile not in (*PROFILES, AUTO):
        raise SettingsError(
            f"COURSE_PROFILE={profile!r} is not one of {', '.join(PROFILES)} (or {AUTO}: "
            "full with a GPU, cpu without)."
        )
    if data not in DATA_SOURCES:
        raise SettingsError(f"COURSE_DATA={data!r} is not one of {', '.join(DATA_SOURCES)}.")
    if devices and not (devices.isdigit() and int(devices) >= 1):
        raise SettingsError(
            f"COURSE_DEVICES={devices!r}: give a whole number, at least 1 (1, 2, 4)."
        )
    return Settings(profile=profile, devices=int(devices) if devices else None, data=data)


def tfds_data_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where tensorflow-datasets keeps prepared datasets: TFDS_DATA_DIR, else
    ~/tensorflow_datasets (the default of tensorflow_datasets.core.constants, read here without
    importing tfds)."""
    env = os.environ if environ is None else environ
    return Path(env.get("TFDS_DATA_DIR") or Path.home() / "tensorflow_datasets")
