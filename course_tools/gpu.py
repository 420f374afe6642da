"""What `course doctor` says about GPUs: what TensorFlow was built for, what it sees, and what to
do when it sees no GPU.

TensorFlow's Linux wheels are built with CUDA, but they load CUDA and cuDNN at run time from
the NVIDIA packages that `pip install "tensorflow[and-cuda]"` brings (the course's extra `gpu`:
`make setup GPU=1`). Without those libraries, or without an NVIDIA driver, TensorFlow runs on
the CPU and says so only in its start-up log, which the course keeps quiet. These rows say it.

Example:

    from course_tools.gpu import report

    report(lambda label, value: print(f"{label:<21}{value}"))

prints, on a Linux machine without an NVIDIA driver, rows like these:

    TensorFlow build     CUDA 12.5.1, cuDNN 9
    CUDA libraries       not installed (make setup GPU=1 installs them)
    NVIDIA driver        none found (no working nvidia-smi)
    no GPU: what to do   No NVIDIA driver found: the course runs on the CPU with simulated ...
"""

from __future__ import annotations

import importlib.metadata
import platform
import shutil
import subprocess
from collections.abc import Callable

#: The pip packages of CUDA and cuDNN that `tensorflow[and-cuda]` installs (two stand for all).
CUDA_PACKAGES = ("nvidia-cuda-runtime-cu12", "nvidia-cudnn-cu12")
#: How the course installs them (the `gpu` extra: pip install -c constraints.txt -e ".[gpu]").
GPU_INSTALL = "make setup GPU=1"


def build_info() -> dict:
    """TensorFlow's build: CUDA and cuDNN versions it was compiled against, when it has them."""
    import tensorflow as tf

    return dict(tf.sysconfig.get_build_info())


def cuda_packages() -> dict[str, str]:
    """{package: version} of the NVIDIA pip packages installed here (empty without them)."""
    found = {}
    for package in CUDA_PACKAGES:
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            pass
    return found


def nvidia_driver() -> str:
    """'<GPU name>, driver <version>' per GPU from nvidia-smi, or '' without a driver."""
    if not shutil.which("nvidia-smi"):
        return ""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    lines = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    if out.returncode != 0 or not lines:
        return ""
    return "; ".join(
        f"{name.strip()}, driver {driver.strip()}"
        for name, _, driver in (line.rpartition(",") for line in lines)
    )


def advice(build: dict, packages: dict[str, str], driver: str, system: str) -> str:
    """What to do when TensorFlow sees no GPU, from what was found (one sentence).

    >>> advice({"is_cuda_build": True}, {}, "", "Linux")[:40]
    'No NVIDIA driver found: the course runs '
    """
    if system == "Darwin":
        return (
            "macOS: TensorFlow has no CUDA GPU support there; the course runs on the CPU "
            "with simulated devices (profile cpu)."
        )
    if not build.get("is_cuda_build"):
        return (
            "This TensorFlow is a CPU-only build: on Windows use WSL2 (Linux wheels), then "
            f"{GPU_INSTALL}."
        )
    if not driver:
        return (
            "No NVIDIA driver found: the course runs on the CPU with simulated devices "
            f"(profile cpu). With an NVIDIA GPU, install its driver, then {GPU_INSTALL}."
        )
    if not packages:
        return f"The driver sees a GPU but TensorFlow has no CUDA libraries: {GPU_INSTALL}."
    return (
        "The driver and the CUDA libraries are there but TensorFlow loaded no GPU: check that "
        "nvidia-smi's 'CUDA Version' is 12 or newer, unset LD_LIBRARY_PATH entries of another "
        'CUDA, and run `TF_CPP_MIN_LOG_LEVEL=0 python -c "import tensorflow as tf; '
        "tf.config.list_physical_devices('GPU')\"` to see which library failed to load."
    )


def report(row: Callable[[str, str], None]) -> None:
    """Print the GPU rows of `course doctor` through `row(label, value)`."""
    import tensorflow as tf

    build = build_info()
    if build.get("is_cuda_build"):
        row(
            "TensorFlow build",
            f"CUDA {build.get('cuda_version')}, cuDNN {build.get('cudnn_version')}",
        )
    else:
        row("TensorFlow build", "CPU only (no CUDA)")
    packages = cuda_packages()
    row(
        "CUDA libraries",
        ", ".join(f"{p} {v}" for p, v in packages.items())
        or f"not installed ({GPU_INSTALL} installs them)",
    )
    driver = nvidia_driver()
    row("NVIDIA driver", driver or "none found (no working nvidia-smi)")
    gpus = tf.config.list_physical_devices("GPU")
    for index, gpu in enumerate(gpus):
        details = tf.config.experimental.get_device_details(gpu)
        capability = ".".join(map(str, details.get("compute_capability", ())))
        row(
            f"GPU {index}",
            details.get("device_name", gpu.name)
            + (f", compute capability {capability}" if capability else ""),
        )
    if not gpus:
        row("no GPU: what to do", advice(build, packages, driver, platform.system()))
