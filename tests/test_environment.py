"""The declared ranges, the verified pins (constraints.txt) and environment.yml agree; the two
distributions hold what they say (the student package no tool, nor a tool's dependency)."""

import json
import re
import shutil
import subprocess
import sys
import zipfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest
from helpers import ROOT
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from course_tools.paths import course_notebooks

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


def project(folder: Path = ROOT) -> dict:
    """The [project] table of `folder`/pyproject.toml (default: the student package's)."""
    return tomllib.loads((folder / "pyproject.toml").read_text())["project"]


#: The tools' distribution (course-tools), in the package's own folder.
TOOLS = ROOT / "course_tools"
#: The two distributions of the repository, each of which declares the other by name only.
OURS = {"course-utils", "course-tools"}


def declared(folder: Path) -> list[Requirement]:
    """Every requirement `folder`/pyproject.toml declares, base and extras, but our own two."""
    table = project(folder)
    texts = table["dependencies"] + [r for e in table["optional-dependencies"].values() for r in e]
    return [r for r in map(Requirement, texts) if _name(r.name) not in OURS]


def test_environment_yml_pins_what_constraints_txt_pins():
    yml = (ROOT / "environment.yml").read_text()
    assert re.search(r"^\s+- python=3\.11\s*$", yml, flags=re.M), "environment.yml uses Python 3.11"
    listed = re.findall(r"^\s+- ([A-Za-z0-9_.\-]+)==(\S+)\s*$", yml, flags=re.M)
    assert {_name(n): v for n, v in listed} == constraints(CONDA_PYTHON)


def test_every_pin_lies_inside_the_declared_ranges():
    ranges = {_name(r.name): r for r in declared(ROOT) + declared(TOOLS)}
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


def test_the_student_package_declares_no_tool_dependency():
    """What Colab installs (course-utils' base) needs none of what only the tools import."""
    student = {_name(Requirement(r).name) for r in project()["dependencies"]}
    tools_only = {_name(r.name) for r in declared(TOOLS)} - student
    assert {"nbformat", "nbclient", "tqdm", "pytest", "sphinx"} <= tools_only
    assert not student & tools_only
    assert "scripts" not in project(), "the `course` command belongs to course-tools"
    assert project(TOOLS)["scripts"] == {"course": "course_tools.cli:main"}


def test_no_student_code_imports_the_tools():
    """course_utils, the lessons, the exercise and the worker scripts run without course_tools
    (as on Colab, where only the solution's install cell brings it, for its hidden tests)."""
    importing = re.compile(r"^\s*(from|import)\s+course_tools\b", re.M)
    sources = {p: p.read_text() for p in (ROOT / "course_utils").glob("*.py")}
    sources |= {p: p.read_text() for p in (ROOT / "tests" / "workers").glob("*.py")}
    for path in course_notebooks(ROOT):
        if path.parent.name != "solutions":
            cells = json.loads(path.read_text())["cells"]
            sources[path] = "\n".join("".join(cell["source"]) for cell in cells)
    offenders = [
        p.relative_to(ROOT).as_posix() for p, text in sources.items() if importing.search(text)
    ]
    assert len(sources) > 10 and offenders == []


def wheel(files: list[Path], source: Path, out: Path) -> zipfile.ZipFile:
    """The wheel pip builds (no dependencies) from a copy of `files` under `source`: a copy, so
    that the build's own folders (build/, *.egg-info) stay out of the checkout."""
    project_dir = out / "project"
    for file in files:
        target = project_dir / file.relative_to(source)
        if file.is_dir():
            shutil.copytree(file, target, ignore=shutil.ignore_patterns("*.egg-info", "build"))
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(file, target)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out), "."],
        cwd=project_dir,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (path,) = out.glob("*.whl")
    return zipfile.ZipFile(path)


@pytest.mark.slow
def test_the_two_wheels_hold_their_own_package(tmp_path):
    """Built as pip builds them: the student wheel (what Colab installs) holds course_utils and
    requires no tool dependency; the tools' wheel holds course_tools and the `course` command."""
    files = [ROOT / "pyproject.toml", ROOT / "README.md", ROOT / "course_utils"]
    student = wheel(files, ROOT, tmp_path / "student")
    packages = {name.split("/")[0] for name in student.namelist() if ".dist-info/" not in name}
    assert packages == {"course_utils"}
    metadata = student.read(next(n for n in student.namelist() if n.endswith("/METADATA")))
    requires = {
        _name(Requirement(line.split(":", 1)[1]).name)
        for line in metadata.decode().splitlines()
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    }
    assert requires == {_name(Requirement(r).name) for r in project()["dependencies"]}
    assert not requires & {"tqdm", "nbformat", "nbclient", "jupyter-server", "course-tools"}
    tools = wheel([TOOLS], TOOLS, tmp_path / "tools")
    names = [n for n in tools.namelist() if ".dist-info/" not in n]
    assert {n.split("/")[0] for n in names} == {"course_tools"}
    assert "course_tools/cli.py" in names and "course_tools/pyproject.toml" not in names
    scripts = next(n for n in tools.namelist() if n.endswith("/entry_points.txt"))
    assert "course = course_tools.cli:main" in tools.read(scripts).decode()


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
