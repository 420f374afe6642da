"""The course's three settings, read from the environment in one place.

| variable         | values                     | default                                   |
|------------------|----------------------------|-------------------------------------------|
| `COURSE_PROFILE` | `full`, `quick`            | `full` (tests and `course run` use quick) |
| `COURSE_DEVICES` | a whole number >= 1        | the machine's GPUs, or 2 simulated CPUs   |
| `COURSE_DATA`    | `auto`, `tfds`, `synthetic`| `auto`                                    |

Example:
    >>> from course_utils.settings import read_settings
    >>> s = read_settings({"COURSE_PROFILE": "quick"})
    >>> s.profile, s.pick(full=12, quick=2)
    ('quick', 2)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

PROFILES = ("full", "quick")
DATA_SOURCES = ("auto", "tfds", "synthetic")


class SettingsError(ValueError):
    """A COURSE_* variable has a value the course does not understand."""


@dataclass(frozen=True)
class Settings:
    """What the notebooks and tests should do on this run.

    `devices` is None when COURSE_DEVICES is unset: `course_utils.setup()` then picks
    the machine's GPUs, or simulates 2 CPU devices when there is no GPU.
    """

    profile: str = "full"
    devices: int | None = None
    data: str = "auto"

    @property
    def quick(self) -> bool:
        return self.profile == "quick"

    def pick(self, *, full: T, quick: T) -> T:
        """Return `full` or `quick` depending on the profile: `EPOCHS = settings.pick(full=12,
        quick=2)`."""
        return quick if self.quick else full


def read_settings(environ: Mapping[str, str] | None = None, **overrides: object) -> Settings:
    """Read COURSE_PROFILE, COURSE_DEVICES and COURSE_DATA; keyword arguments win over the
    environment.

    Raises SettingsError with the accepted values when one is wrong.
    """
    env = os.environ if environ is None else environ
    profile = overrides.get("profile") or env.get("COURSE_PROFILE", "") or "full"
    data = overrides.get("data") or env.get("COURSE_DATA", "") or "auto"
    devices = overrides.get("devices")
    if devices is None and env.get("COURSE_DEVICES", "").strip():
        devices = env["COURSE_DEVICES"].strip()

    profile = str(profile).strip().lower()
    if profile not in PROFILES:
        raise SettingsError(f"COURSE_PROFILE={profile!r} is not one of {', '.join(PROFILES)}.")
    data = str(data).strip().lower()
    if data not in DATA_SOURCES:
        raise SettingsError(f"COURSE_DATA={data!r} is not one of {', '.join(DATA_SOURCES)}.")
    if devices is not None:
        try:
            devices = int(devices)
        except (TypeError, ValueError):
            raise SettingsError(
                f"COURSE_DEVICES={devices!r} is not a whole number (try 1, 2 or 4)."
            ) from None
        if devices < 1:
            raise SettingsError(f"COURSE_DEVICES={devices} must be at least 1.")
    return Settings(profile=profile, devices=devices, data=data)
