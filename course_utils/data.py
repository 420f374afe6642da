"""The course's datasets as (image, label) tf.data pipelines, online or off: `load`.

`load(name, split)` is `tfds.load(name, split=split, as_supervised=True)` with pixels scaled to
float32 in [0, 1], sized by the profile, unbatched and unshuffled: the notebooks write the rest of
the pipeline. COURSE_DATA says where the data comes from:

  auto       the real data when it is on disk or its server answers within seconds; otherwise
             a synthetic stand-in, announced in one line.
  tfds       the real data, or a clear error (never tfds's silent wait offline).
  synthetic  always the stand-in: same shapes, dtypes and classes, learnable by a small CNN.

Example:

    from course_utils import data

    train = data.load("mnist", "train")  # quick profile: the first 2,048 examples
"""

from __future__ import annotations

import functools
import os
import socket
import threading
import urllib.parse
import zlib
from dataclasses import dataclass

import numpy as np

from course_utils.quiet import import_tensorflow
from course_utils.settings import Settings, read_settings, tfds_data_dir

tf = import_tensorflow()

#: How long `auto` and `tfds` wait for a download server before deciding we are offline.
NETWORK_TIMEOUT_S = 3.0
#: Examples per split in the quick profile (tests) and the cpu one (minutes per notebook).
QUICK_EXAMPLES = {"train": 2048, "test": 512}
CPU_EXAMPLES = {"train": 20_000, "test": 5_000}


@dataclass(frozen=True)
class DatasetSpec:
    """What a course dataset looks like, and where tensorflow-datasets downloads it from."""

    name: str
    image_shape: tuple[int, int, int]
    class_names: tuple[str, ...]
    split_sizes: dict[str, int]
    download_url: str

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def download_address(self) -> tuple[str, int]:
        url = urllib.parse.urlsplit(self.download_url)  # some serve plain HTTP only
        return url.hostname, url.port or (443 if url.scheme == "https" else 80)


DIGITS = tuple("0123456789")
CLOTHES = tuple(
    "T-shirt/top,Trouser,Pullover,Dress,Coat,Sandal,Shirt,Sneaker,Bag,Ankle boot".split(",")
)
SPECS = {
    s.name: s
    for s in [
        DatasetSpec("mnist", (28, 28, 1), DIGITS, {"train": 60000, "test": 10000},
                    "https://storage.googleapis.com/cvdf-datasets/mnist/"),
        DatasetSpec("fashion_mnist", (28, 28, 1), CLOTHES, {"train": 60000, "test": 10000},
                    "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"),
        DatasetSpec("svhn_cropped", (32, 32, 3), DIGITS, {"train": 73257, "test": 26032},
                    "http://ufldl.stanford.edu/housenumbers/"),
    ]
}  # fmt: skip


class DataUnavailableError(RuntimeError):
    """COURSE_DATA=tfds, but the real dataset is neither on disk nor downloadable."""


def spec(name: str) -> DatasetSpec:
    if name not in SPECS:
        raise ValueError(f"Unknown dataset {name!r}: the course uses {', '.join(SPECS)}.")
    return SPECS[name]


def load(
    name: str,
    split: str,
    *,
    limit: int | None = None,
    source: str | None = None,
    settings: Settings | None = None,
) -> tf.data.Dataset:
    """Split "train" or "test" of dataset `name` as a tf.data.Dataset of (image, label).

    limit: at most this many examples (default: all, CPU_EXAMPLES or QUICK_EXAMPLES by profile).
    source: "auto", "tfds" or "synthetic" (default: COURSE_DATA).
    """
    settings = settings or read_settings()
    info = spec(name)
    if split not in info.split_sizes:
        raise ValueError(f"Unknown split {split!r} for {name}: use {', '.join(info.split_sizes)}.")
    if limit is None:
        limit = settings.pick(full=None, cpu=CPU_EXAMPLES[split], quick=QUICK_EXAMPLES[split])
    if use_real_data(name, source or settings.data):
        builder = tfds_builder(name)
        if not builder.is_prepared():
            print(f"Downloading and preparing {name} once, into {builder.data_dir} ...")
            builder.download_and_prepare()
        dataset = builder.as_dataset(split=split, as_supervised=True).take(limit or -1)
    else:
        count = min(limit or info.split_sizes[split], info.split_sizes[split])
        dataset = tf.data.Dataset.from_tensor_slices(synthetic_arrays(name, split, count))
    return dataset.map(lambda image, label: (tf.cast(image, tf.float32) / 255.0, label))


def use_real_data(name: str, source: str) -> bool:
    """Whether `load` reads `name` with tensorflow-datasets (True) or makes the stand-in. Without
    real data, "auto" says once why, and "tfds" raises DataUnavailableError."""
    spec(name)
    if source == "synthetic":
        return False
    ok, reason = real_data_status(name)
    if not ok and source == "tfds":
        raise DataUnavailableError(
            f"COURSE_DATA=tfds needs the real {name} data, but {reason}. Connect this machine "
            f"to the internet, or copy a prepared {name} folder into {tfds_data_dir()} (or point "
            "TFDS_DATA_DIR at one), or set COURSE_DATA=auto to fall back to a synthetic stand-in."
        )
    if not ok and name not in _announced:
        _announced.add(name)
        print(
            f"COURSE_DATA=auto: {name} is not available ({reason}); using a synthetic stand-in "
            "with the same shapes and classes."
        )
    return ok


_announced: set[str] = set()  # the datasets whose stand-in was announced


# Once per process (offline, each answer costs NETWORK_TIMEOUT_S); a restart asks again.
@functools.cache
def real_data_status(name: str) -> tuple[bool, str]:
    """(True, where) when the real data is on disk or its server answers; else (False, why)."""
    host, port = spec(name).download_address
    try:
        prepared = is_prepared(name)
    # Any failure means tfds cannot serve the data (seen with mismatched protobuf versions).
    except Exception as exc:  # noqa: BLE001
        error = f"{type(exc).__name__}: {str(exc)[:160]}"
        return False, f"tensorflow-datasets does not work in this environment ({error})"
    if prepared or can_reach(host, port):
        return True, "prepared on disk" if prepared else f"{host} is reachable"
    return False, f"it is not on disk and {host} did not answer within {NETWORK_TIMEOUT_S:.0f} s"


def is_prepared(name: str) -> bool:
    """Whether tensorflow-datasets has `name` in its data folder (TFDS_DATA_DIR)."""
    return tfds_builder(name).is_prepared()


def import_tfds():
    """`import tensorflow_datasets as tfds`, also under protobuf 5 (Colab's 5.29).

    tfds imports tensorflow-metadata's protos, which 1.21 (Colab's) generated with protobuf 6.31:
    they refuse older protobuf runtimes, though they work there. The check's own switch,
    TEMPORARILY_DISABLE_PROTOBUF_VERSION_CHECK, lets them load; it is set only under protobuf 5.
    """
    from google.protobuf import __version__ as protobuf_version

    if int(protobuf_version.split(".")[0]) < 6:
        os.environ.setdefault("TEMPORARILY_DISABLE_PROTOBUF_VERSION_CHECK", "true")
    import tensorflow_datasets as tfds

    return tfds


def tfds_builder(name: str):
    """The tensorflow-datasets builder of `name`. For SVHN: one that downloads only train and test
    (235 MiB instead of 1.5 GiB: tfds's own also fetches the 531,131-image `extra` split, which
    the course does not use); a prepared `svhn_cropped` reads the same either way."""
    # tfds 4.9 leaves an empty /tmp/tmpXXXXXXXXtfds folder each time it builds the builder of a
    # dataset not prepared yet (DatasetInfo.initialize_from_bucket makes it before it finds its
    # GCS bucket disabled), and no argument of tfds.builder skips that: such a builder is built
    # once per process and data folder. One of a prepared dataset (no folder) is built afresh,
    # so that it reads the splits another process may have prepared since.
    key = (name, str(tfds_data_dir()))
    builder = _not_prepared.get(key)
    if builder is None or builder.is_prepared():
        builder = _build(name)
        _not_prepared.pop(key, None)
        if not builder.is_prepared():
            _not_prepared[key] = builder
    return builder


_not_prepared: dict[tuple[str, str], object] = {}  # (name, data folder): its builder


def _build(name: str):
    tfds = import_tfds()
    if name != "svhn_cropped":
        return tfds.builder(name)
    svhn_cropped = tfds.builder_cls(name)

    # skip_registration: tfds registers each builder class by name, once.
    class SvhnCroppedTrainTest(svhn_cropped, skip_registration=True):
        """tfds's svhn_cropped, same features and version, without the `extra` split."""

        # tfds's recorded sizes and checksums of the files.
        url_infos = svhn_cropped.url_infos

        def _split_generators(self, dl_manager):
            url = SPECS["svhn_cropped"].download_url + "{}_32x32.mat"
            files = dl_manager.download({s: url.format(s) for s in ("train", "test")})
            return [
                tfds.core.SplitGenerator(s, gen_kwargs={"split_prefix": f"{s}_", "filepath": f})
                for s, f in files.items()
            ]

    return SvhnCroppedTrainTest()


def can_reach(host: str, port: int = 443, timeout: float = NETWORK_TIMEOUT_S) -> bool:
    """Whether a TCP connection to host:port opens within `timeout` seconds. The socket's timeout
    does not cover the name look-up, which can hang offline: a thread tries, and is given up on."""
    opened = threading.Event()

    def attempt() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                opened.set()
        except OSError:
            pass

    threading.Thread(target=attempt, daemon=True).start()
    return opened.wait(timeout)


def synthetic_arrays(
    name: str, split: str, num_examples: int, seed: int | np.random.Generator | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """uint8 images and int64 labels shaped like `name`'s, learnable in a few epochs, not at once:
    each example blends its class's smooth random pattern (the same in both splits) with another
    class's, plus noise. `seed`: other examples of the same distribution than the split's (the
    grader draws examples no notebook has seen)."""
    height, width, channels = spec(name).image_shape
    classes = spec(name).num_classes
    coarse = np.random.default_rng(zlib.crc32(name.encode())).random(
        (classes, height // 4, width // 4, channels)
    )
    # Smooth 4x4 blocks.
    patterns = np.kron(coarse, np.ones((1, 4, 4, 1))).astype(np.float32)
    rng = np.random.default_rng(zlib.crc32(f"{name}/{split}".encode()) if seed is None else seed)
    labels = rng.integers(0, classes, size=num_examples)
    others = (labels + rng.integers(1, classes, size=num_examples)) % classes
    images = np.empty((num_examples, height, width, channels), dtype=np.uint8)
    # In chunks: full-size SVHN would need GBs at once.
    for start in range(0, num_examples, 4096):
        end = min(start + 4096, num_examples)
        weight = rng.uniform(0.5, 0.7, size=(end - start, 1, 1, 1)).astype(np.float32)
        noise = rng.normal(0.0, 0.3, size=(end - start, height, width, channels)).astype(np.float32)
        blend = weight * patterns[labels[start:end]] + (1 - weight) * patterns[others[start:end]]
        images[start:end] = (np.clip(blend + noise, 0, 1) * 255).astype(np.uint8)
    return images, labels.astype(np.int64)
