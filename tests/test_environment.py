"""pyproject.toml and environment.yml pin the same packages at the same versions."""

import re
import sys

from conftest import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib


def _pins(requirements):
    pins = {}
    for req in requirements:
        req = req.split(";")[0].strip()
        if req.startswith("-e") or not req:
            continue
        name, version = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([^\s]+)", req).groups()
        pins[name.lower().replace("_", "-")] = version
    return pins


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = _pins(
        project["dependencies"]
        + [r for r in project["optional-dependencies"]["test"] if "python_version" not in r]
    )
    yml = (ROOT / "environment.yml").read_text()
    pip_lines = re.findall(r"^\s+- ([A-Za-z0-9_.\-]+==\S+)\s*$", yml, flags=re.M)
    assert _pins(pip_lines) == wanted


def test_only_one_tensorflow_distribution_is_installed():
    from importlib.metadata import PackageNotFoundError, version

    installed = []
    for dist in ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tf-nightly"):
        try:
            version(dist)
            installed.append(dist)
        except PackageNotFoundError:
            pass
    assert installed == ["tensorflow"]
