"""The course's own JupyterLab (`make lab`): settings that `make setup` installs into .venv.

Two things a student would otherwise meet on every notebook:

- JupyterLab's "Would you like to get notified about official Jupyter news?" box, which covers
  the outputs until dismissed. An `overrides.json` in the environment's JupyterLab settings folder
  answers it with "never" (and turns off the update check, which only runs with the news on).
- A notebook that shows as modified the moment it opens, so that closing it untouched asks to
  save. When the kernel starts, JupyterLab writes the kernel's `language_info` (with the exact
  Python version) and `kernelspec` into the notebook's metadata, and any difference marks it
  modified. The committed notebooks carry only `{"name": "python"}`: the version differs from one
  machine to the next, so no committed value could match every student's. `CourseContentsManager`
  fills in this environment's Python `language_info` when JupyterLab loads such a notebook (the
  file on disk is unchanged), and `make setup` installs the kernel under the display name the
  notebooks carry ("Python 3").

Install the kernel and both settings into this Python's environment (what `make setup` does):

    $ python -m course_tools.lab

Example:
    >>> from course_tools.lab import python_language_info
    >>> python_language_info()["pygments_lexer"]
    'ipython3'
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager

#: JupyterLab settings every user of this environment gets (Settings > Settings Editor can
#: still change them per user).
LAB_OVERRIDES = {
    "@jupyterlab/apputils-extension:notification": {
        "fetchNews": "false",
        "checkForUpdates": False,
    }
}
#: Jupyter Server configuration: notebooks load with this environment's language_info.
SERVER_CONFIG = {"ServerApp": {"contents_manager_class": "course_tools.lab.CourseContentsManager"}}
#: The kernel name and display name the course's notebooks carry in their metadata.
KERNEL_NAME, KERNEL_DISPLAY_NAME = "python3", "Python 3"


def python_language_info() -> dict:
    """The `language_info` an IPython kernel of this Python reports (and JupyterLab stores)."""
    from ipykernel.ipkernel import IPythonKernel

    return json.loads(json.dumps(IPythonKernel.language_info))


class CourseContentsManager(AsyncLargeFileManager):
    """Jupyter Server's default contents manager, except that a notebook for this Python kernel
    whose `language_info` is only a name is given the kernel's full `language_info` as it loads,
    so that the kernel's start changes nothing in it and it opens unmodified."""

    # Jupyter Server's own signature, which its callers use positionally: FBT002 cannot apply.
    async def get(self, path, content=True, type=None, format=None, **kwargs):  # noqa: FBT002
        model = await super().get(path, content=content, type=type, format=format, **kwargs)
        if model["type"] == "notebook" and model.get("content"):
            metadata = model["content"]["metadata"]
            kernel = metadata.get("kernelspec", {}).get("name")
            if kernel == KERNEL_NAME and metadata.get("language_info") == {"name": "python"}:
                metadata["language_info"] = python_language_info()
        return model


def install(prefix: Path = Path(sys.prefix)) -> list[Path]:
    """Install the course's kernel and write the settings into the environment at `prefix`
    (this Python's, by default); return the files and folders written."""
    from ipykernel.kernelspec import install as install_kernel

    # The kernel finds this environment's programs (tensorboard for %tensorboard) on PATH,
    # however Jupyter was started; jupyter_client expands ${PATH} when it starts the kernel.
    kernel = install_kernel(
        kernel_name=KERNEL_NAME,
        display_name=KERNEL_DISPLAY_NAME,
        prefix=str(prefix),
        env={"PATH": f"{prefix / 'bin'}:${{PATH}}"},
    )
    # One file each (Jupyter Server reads only extension switches from jupyter_server_config.d):
    # the course's settings are merged into what the files already hold.
    overrides = prefix / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
    server = prefix / "etc" / "jupyter" / "jupyter_server_config.json"
    for path, settings in ((overrides, LAB_OVERRIDES), (server, SERVER_CONFIG)):
        merged = json.loads(path.read_text()) if path.exists() else {}
        for section, values in settings.items():
            merged[section] = {**merged.get(section, {}), **values}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(merged, indent=2) + "\n")
    return [Path(kernel), overrides, server]


if __name__ == "__main__":
    for written in install():
        print(f"wrote {written}")
