"""`course doctor`'s GPU rows (course_tools/gpu.py): build, libraries, driver, advice."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from course_tools import gpu


def fake_nvidia_smi(folder: Path, output: str, exit_code: int = 0) -> None:
    script = folder / "nvidia-smi"
    script.write_text(f"#!/bin/sh\nprintf '{output}'\nexit {exit_code}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


def test_driver_and_gpus_come_from_nvidia_smi(tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path, "NVIDIA A100-SXM4-40GB, 535.104.05\\nTesla T4, 535.104.05\\n")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert gpu.nvidia_driver() == (
        "NVIDIA A100-SXM4-40GB, driver 535.104.05; Tesla T4, driver 535.104.05"
    )


def test_a_failing_nvidia_smi_counts_as_no_driver(tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path, "NVIDIA-SMI has failed\\n", exit_code=9)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert gpu.nvidia_driver() == ""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert gpu.nvidia_driver() == ""


@pytest.mark.parametrize(
    "build, packages, driver, system, expected",
    [
        ({"is_cuda_build": True}, {}, "", "Darwin", "macOS"),
        ({"is_cuda_build": False}, {}, "", "Windows", "WSL2"),
        ({"is_cuda_build": True}, {}, "", "Linux", "No NVIDIA driver found"),
        ({"is_cuda_build": True}, {}, "T4, driver 535", "Linux", "no CUDA libraries"),
        ({"is_cuda_build": True}, {"nvidia-cudnn-cu12": "9.3"}, "T4", "Linux", "TF_CPP_MIN"),
    ],
)
def test_advice_names_the_next_step(build, packages, driver, system, expected):
    text = gpu.advice(build, packages, driver, system)
    assert expected in text
    if system == "Linux" and "No NVIDIA" not in expected and packages:
        assert "make setup GPU=1" not in text  # the libraries are there already
    elif system in ("Linux", "Windows"):
        assert "make setup GPU=1" in text


def test_doctor_rows_on_this_machine(python_subprocess):
    """What `course doctor` prints here: TensorFlow's own build info, and with no GPU the advice."""
    proc = python_subprocess(
        """
        import tensorflow as tf
        from course_tools import gpu

        rows = {}
        gpu.report(lambda label, value: rows.__setitem__(label, value))
        info = tf.sysconfig.get_build_info()
        print(repr((rows, dict(info), len(tf.config.list_physical_devices("GPU")))))
        """
    )
    rows, info, gpus = eval(proc.stdout.strip().splitlines()[-1])
    if info.get("is_cuda_build"):
        assert rows["TensorFlow build"] == (
            f"CUDA {info['cuda_version']}, cuDNN {info['cudnn_version']}"
        )
    else:
        assert rows["TensorFlow build"] == "CPU only (no CUDA)"
    assert set(rows) >= {"TensorFlow build", "CUDA libraries", "NVIDIA driver"}
    if gpus:
        assert [label for label in rows if label.startswith("GPU ")] == [
            f"GPU {i}" for i in range(gpus)
        ]
    else:
        assert "no GPU: what to do" in rows
        assert len(rows["no GPU: what to do"]) > 40
