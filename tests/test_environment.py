"""The declared ranges, the verified pins (constraints.txt) and environment.yml agree."""

import re
import sys
from importlib.metadata import PackageNotFoundError, version

from helpers import ROOT
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

CONDA_PYTHON = {"python_version": "3.11", "python_full_version": "3.11.0"}


def _name(text: str) -> str:
    return re.sub(r"[-_.]+", "-", text).lower()


def constraints(environment: dict | None = None) -> dict[str, str]:
    """{name: version} of constraints.txt for a Python (default: this one), markers applied."""
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if not line:
            continue
        requirement = Requirement(line)
        if requirement.marker and not requirement.marker.evaluate(environment):
            continue
        (spec,) = requirement.specifier
        assert spec.operator == "==", f"constraints.txt pins exact versions: {line}"
        pins[_name(requirement.name)] = spec.version
    return pins


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_environment_yml_pins_what_constraints_txt_pins():
    yml = (ROOT / "environment.yml").read_text()
    assert re.search(r"^\s+- python=3\.11\s*$", yml, flags=re.M), "environment.yml uses Python 3.11"
    listed = re.findall(r"^\s+- ([A-Za-z0-9_.\-]+)==(\S+)\s*$", yml, flags=re.M)
    assert {_name(n): v for n, v in listed} == constraints(CONDA_PYTHON)


def test_every_pin_lies_inside_the_declared_ranges():
    declared = project()["dependencies"] + [
        r for extra in project()["optional-dependencies"].values() for r in extra
    ]
    ranges = {_name(Requirement(r).name): Requirement(r) for r in declared}
    for python in ("3.10", "3.11", "3.12", "3.13"):
        environment = {"python_version": python, "python_full_version": f"{python}.0"}
        for name, pinned in constraints(environment).items():
            assert name in ranges, (
                f"constraints.txt pins {name}, which pyproject.toml does not declare"
            )
            assert ranges[name].specifier.contains(pinned), f"{name}=={pinned} (Python {python})"


def test_colabs_versions_lie_inside_the_declared_ranges():
    """Installing the course into Colab must not replace its TensorFlow, Keras or Jupyter."""
    colab = {}  # Colab's versions, as the CI's Colab-stack check installs them
    for line in (ROOT / ".ci" / "colab-constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, colab_version = line.split("==")
            colab[_name(name)] = colab_version
    assert {"tensorflow", "keras", "tf-keras", "ipykernel", "jupyter-client"} <= set(colab)
    ranges = {_name(Requirement(r).name): Requirement(r) for r in project()["dependencies"]}
    supported = SpecifierSet(project()["requires-python"])
    assert all(supported.contains(v) for v in ("3.10.0", "3.13.15")), (
        "Python 3.10-3.13 (Colab: 3.13)"
    )
    for name, colab_version in colab.items():
        if name in ranges:  # a package the course declares: Colab's version must be admitted
            assert ranges[name].specifier.contains(colab_version), (
                f"Colab's {name}=={colab_version}"
            )
    jupyter_side = {"jupyterlab", "ipykernel", "nbval", "nbclient", "nbformat", "notebook"}
    assert not jupyter_side & set(ranges), "Jupyter packages belong in the extras, not the base"


def test_only_one_tensorflow_distribution_is_installed():
    installed = []
    for dist in ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tf-nightly"):
        try:
            version(dist)
            installed.append(dist)
        except PackageNotFoundError:
            pass
    assert installed == ["tensorflow"]


def test_doctor_names_versions_outside_the_tested_range():
    from course_tools.doctor import TESTED, untested_versions

    assert untested_versions({"Python": "3.13.15", "TensorFlow": "2.20.0", "Keras": "3.13.2"}) == []
    assert untested_versions(
        {"Python": "3.14.0", "TensorFlow": "2.22.0rc1", "Keras": "3.15.1"}
    ) == [
        "Python 3.14.0",
        "TensorFlow 2.22.0rc1",
    ]
    assert set(TESTED) == {"Python", "TensorFlow", "Keras"}


def test_what_the_tests_run_is_inside_the_tested_range():
    """`course doctor` must not call a version untested when the pins (or Colab) are what run."""
    from course_tools.doctor import untested_versions

    for python in ("3.10", "3.11", "3.12", "3.13"):
        pins = constraints({"python_version": python, "python_full_version": f"{python}.0"})
        versions = {"Python": python, "TensorFlow": pins["tensorflow"], "Keras": pins["keras"]}
        assert untested_versions(versions) == [], f"Python {python}: {versions}"
    colab = dict(
        line.split("#")[0].strip().split("==")
        for line in (ROOT / ".ci" / "colab-constraints.txt").read_text().splitlines()
        if line.split("#")[0].strip()
    )
    colab_versions = {"Python": "3.13", "TensorFlow": colab["tensorflow"], "Keras": colab["keras"]}
    assert untested_versions(colab_versions) == [], colab_versions
