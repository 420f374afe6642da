"""Execute notebooks headless with nbclient, the way `course run` and `course grade` do.

Each notebook runs in its own kernel process, in its own folder, with the environment you give.
The executed copy (outputs included) is written even when a cell fails, so the failure can be read.

Example:
    >>> from course_utils.tools.runner import execute
    >>> result = execute("notebooks/01_keras_fit_mnist.ipynb", "build/01_keras_fit_mnist.ipynb",
    ...                  env={"COURSE_PROFILE": "quick"})
    >>> result.ok, result.seconds
    (True, 31.2)
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError
from tqdm.auto import tqdm

ANSI_ESCAPES = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class ExecutionResult:
    """How one notebook execution went."""

    path: Path
    output_path: Path
    ok: bool
    seconds: float
    error: str = ""  # the failing cell's source and error, when not ok
    failed_cell: int | None = None  # index of the failing code cell among all cells


def execute(
    path: str | os.PathLike,
    output_path: str | os.PathLike,
    *,
    env: dict[str, str] | None = None,
    cell_timeout: int = 600,
    kernel_name: str = "python3",
    cwd: str | os.PathLike | None = None,
    progress: str | None = None,
) -> ExecutionResult:
    """Run every cell of `path` in a fresh kernel and write the executed copy to `output_path`.

    env: variables added to this process's environment for the kernel (e.g. COURSE_PROFILE).
    cell_timeout: seconds one cell may run before execution stops with an error.
    cwd: the kernel's working folder (default: the notebook's own folder, as in JupyterLab).
    progress: when given, a progress bar over the code cells with this label.
    Stops at the first failing cell (like "Run All") and reports it. Cells marked `# NBVAL_SKIP`
    (interactive-only, such as starting TensorBoard) are not run, as under nbval.
    """
    path, output_path = Path(path), Path(output_path)
    notebook = nbformat.read(path, as_version=4)
    for (
        cell
    ) in notebook.cells:  # interactive-only cells (starting TensorBoard, ...) are marked for nbval
        if cell.cell_type == "code" and "NBVAL_SKIP" in cell.source:
            cell.metadata.setdefault("tags", []).append("skip-execution")
    sockets = tempfile.TemporaryDirectory(prefix="course-kernel-")
    # Unix sockets instead of TCP: ipykernel 7 warns at every start that TCP traffic is unencrypted.
    kernel = KernelManager(
        kernel_name=kernel_name, transport="ipc", ip=os.path.join(sockets.name, "kernel")
    )
    client = NotebookClient(
        notebook,
        km=kernel,
        timeout=cell_timeout,
        kernel_name=kernel_name,
        resources={"metadata": {"path": str(cwd or path.parent)}},
    )
    bar = None
    if progress:
        bar = tqdm(
            total=sum(c.cell_type == "code" for c in notebook.cells),
            desc=progress,
            unit="cell",
            leave=False,
        )
        client.on_cell_executed = lambda **_: bar.update()
    kernel_env = {**os.environ, **(env or {})}
    started = time.perf_counter()
    ok, error, failed = True, "", None
    try:
        client.execute(env=kernel_env)
    except (CellExecutionError, CellTimeoutError, DeadKernelError) as exc:
        ok, error = False, ANSI_ESCAPES.sub("", str(exc))  # tracebacks come coloured
        failed = _first_failed_cell(notebook)
    finally:
        if bar is not None:
            bar.close()
        if kernel.has_kernel:  # nbclient only shuts down kernels it created itself
            kernel.shutdown_kernel(now=True)
        sockets.cleanup()
    seconds = time.perf_counter() - started
    output_path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, output_path)
    return ExecutionResult(path, output_path, ok, seconds, error, failed)


def _first_failed_cell(notebook) -> int | None:
    for index, cell in enumerate(notebook.cells):
        if any(output.get("output_type") == "error" for output in cell.get("outputs", [])):
            return index
    return None
