"""The course's JupyterLab settings (course_tools/lab.py), as `make setup` installs them.

tests/test_browser.py checks their effect in a real browser; these check the files and the
contents manager without one.
"""

from __future__ import annotations

import asyncio
import json
import platform

import nbformat

from course_tools import lab


def test_install_writes_the_kernel_and_both_settings_keeping_the_users(tmp_path):
    # Settings already in the environment stay: the user's JupyterLab overrides and server file.
    own_overrides = {"@jupyterlab/apputils-extension:themes": {"theme": "JupyterLab Dark"}}
    settings = tmp_path / "share/jupyter/lab/settings"
    settings.mkdir(parents=True)
    (settings / "overrides.json").write_text(json.dumps(own_overrides))
    own_server = tmp_path / "etc/jupyter/jupyter_server_config.json"
    own_server.parent.mkdir(parents=True)
    own_server.write_text('{"ServerApp": {"open_browser": false}}')
    kernel, overrides, server = lab.install(tmp_path)
    assert (
        json.loads(overrides.read_text())["@jupyterlab/apputils-extension:themes"]
        == (own_overrides["@jupyterlab/apputils-extension:themes"])
    )
    assert json.loads(own_server.read_text())["ServerApp"]["open_browser"] is False

    spec = json.loads((kernel / "kernel.json").read_text())
    assert kernel.name == "python3" and spec["display_name"] == "Python 3"
    assert overrides == tmp_path / "share/jupyter/lab/settings/overrides.json"
    news = json.loads(overrides.read_text())["@jupyterlab/apputils-extension:notification"]
    assert news == {"fetchNews": "false", "checkForUpdates": False}
    assert server == own_server
    assert json.loads(server.read_text())["ServerApp"]["contents_manager_class"] == (
        "course_tools.lab.CourseContentsManager"
    )


def test_the_notebooks_carry_what_the_installed_kernel_reports():
    """JupyterLab compares the notebook's kernelspec with the kernel's: they must be equal."""
    from course_tools.paths import course_notebooks

    for path in course_notebooks():
        metadata = nbformat.read(path, as_version=4).metadata
        assert metadata["kernelspec"] == {
            "display_name": lab.KERNEL_DISPLAY_NAME,
            "language": "python",
            "name": lab.KERNEL_NAME,
        }, path.name
        assert metadata["language_info"] == {"name": "python"}, path.name


def test_a_course_notebook_loads_with_this_pythons_language_info(tmp_path):
    def notebook(kernel: str, language_info: dict) -> str:
        nb = nbformat.v4.new_notebook(
            metadata={
                "kernelspec": {"display_name": "X", "language": "python", "name": kernel},
                "language_info": language_info,
            }
        )
        return nbformat.writes(nb)

    (tmp_path / "course.ipynb").write_text(notebook("python3", {"name": "python"}))
    (tmp_path / "other.ipynb").write_text(notebook("julia-1.10", {"name": "julia"}))
    manager = lab.CourseContentsManager(root_dir=str(tmp_path))
    loaded = asyncio.run(manager.get("course.ipynb"))["content"]["metadata"]["language_info"]
    assert loaded["version"] == platform.python_version()
    assert loaded["codemirror_mode"] == {"name": "ipython", "version": 3}
    other = asyncio.run(manager.get("other.ipynb"))["content"]["metadata"]["language_info"]
    assert other == {"name": "julia"}
    on_disk = json.loads((tmp_path / "course.ipynb").read_text())["metadata"]
    assert on_disk["language_info"] == {"name": "python"}  # the file itself is unchanged
