"""Load the course's datasets as (image, label) tf.data pipelines, online or off.

Every dataset comes back the same way: unbatched, unshuffled `(image, label)` pairs with float32
images of shape (height, width, channels) scaled to [0, 1] and int64 labels. Batching, caching,
shuffling and prefetching are left to the notebooks, because they are part of the lesson.

Where the data comes from follows COURSE_DATA:
  auto       the real data via tensorflow-datasets when it is already on disk or its download
             server answers within a few seconds; otherwise one printed line and a synthetic
             stand-in (so a notebook still runs on a train, or in CI).
  tfds       the real data, or a clear error (never tfds's silent 10-retry wait offline).
  synthetic  always the stand-in: same shapes, dtypes and classes, learnable by a small CNN.

Notebooks 1 and 2 write the tensorflow-datasets lines themselves and ask this module only
whether to use them (`use_real_data`) and for the stand-in (`stand_in`, shaped like tfds's
output, so the same `.map(scale)` follows).

Example:
    >>> from course_utils import data
    >>> if data.use_real_data("mnist"):
    ...     train_raw = tfds.load("mnist", split="train", as_supervised=True)
    ... else:
    ...     train_raw = data.stand_in("mnist", "train")  # uint8 images, like tfds
    >>> train = data.load("mnist", "train")          # honours COURSE_PROFILE (quick: a subset)
    >>> train.element_spec
    (TensorSpec(shape=(28, 28, 1), dtype=tf.float32, name=None), TensorSpec(shape=(),
    dtype=tf.int64, name=None))
"""

from __future__ import annotations

import functools
import os
import socket
import threading
import zlib
from dataclasses import dataclass

import numpy as np

from course_utils.quiet import import_tensorflow
from course_utils.settings import Settings, read_settings

tf = import_tensorflow()  # `import tensorflow as tf`, without its start-up log lines

#: How long `auto` and `tfds` wait for a download server before deciding we are offline.
NETWORK_TIMEOUT_S = 3.0

#: Examples per split in the quick profile (tests, `course run`): small enough for 2 CPU cores.
QUICK_EXAMPLES = {"train": 2048, "test": 512}
#: The cpu profile (no GPU): enough to learn from, few enough for minutes per notebook on a CPU.
CPU_EXAMPLES = {"train": 20_000, "test": 5_000}


@dataclass(frozen=True)
class DatasetSpec:
    """What a course dataset looks like, and where tensorflow-datasets downloads it from."""

    name: str
    image_shape: tuple[int, int, int]
    num_classes: int
    class_names: tuple[str, ...]
    split_sizes: dict[str, int]
    download_host: str


DIGITS = tuple(str(d) for d in range(10))
SPECS = {
    "mnist": DatasetSpec(
        "mnist", (28, 28, 1), 10, DIGITS, {"train": 60000, "test": 10000}, "storage.googleapis.com"
    ),
    "fashion_mnist": DatasetSpec(
        "fashion_mnist",
        (28, 28, 1),
        10,
        (
            "T-shirt/top",
            "Trouser",
            "Pullover",
            "Dress",
            "Coat",
            "Sandal",
            "Shirt",
            "Sneaker",
            "Bag",
            "Ankle boot",
        ),
        {"train": 60000, "test": 10000},
        "fashion-mnist.s3-website.eu-central-1.amazonaws.com",
    ),
    "svhn_cropped": DatasetSpec(
        "svhn_cropped",
        (32, 32, 3),
        10,
        DIGITS,
        {"train": 73257, "test": 26032},
        "ufldl.stanford.edu",
    ),
}


class DataUnavailableError(RuntimeError):
    """The real dataset was required (COURSE_DATA=tfds) but is neither on disk nor downloadable."""


def spec(name: str) -> DatasetSpec:
    """The DatasetSpec of a course dataset; a clear error for any other name."""
    try:
        return SPECS[name]
    except KeyError:
        raise ValueError(f"Unknown dataset {name!r}: the course uses {', '.join(SPECS)}.") from None


def load(
    name: str,
    split: str,
    *,
    limit: int | None = None,
    source: str | None = None,
    settings: Settings | None = None,
):
    """Return `split` of dataset `name` as a tf.data.Dataset of (image, label).

    limit: at most this many examples; default: everything in the full profile,
        CPU_EXAMPLES in the cpu one, QUICK_EXAMPLES in the quick one.
    source: "auto", "tfds" or "synthetic"; default: COURSE_DATA.
    """
    settings = settings or read_settings()
    source = source or settings.data
    info = spec(name)
    base_split = split.split("[")[0]
    if base_split not in info.split_sizes:
        raise ValueError(
            f"Unknown split {split!r} for {name}: use one of {', '.join(info.split_sizes)}."
        )
    if limit is None and settings.quick:
        limit = QUICK_EXAMPLES.get(base_split)
    elif limit is None and settings.profile == "cpu":
        limit = CPU_EXAMPLES.get(base_split)

    if not use_real_data(name, source):
        return synthetic_dataset(name, base_split, limit or info.split_sizes[base_split])
    return _load_tfds(name, split, limit)


def use_real_data(name: str, source: str | None = None) -> bool:
    """Whether to load `name` through tensorflow-datasets (True) or use the stand-in (False).

    source: "auto", "tfds" or "synthetic"; default: COURSE_DATA. With "auto" and no real data,
    prints one line saying why the stand-in is used; with "tfds" and no real data, raises
    DataUnavailableError saying what to do.
    """
    source = source or read_settings().data
    spec(name)
    if source == "synthetic":
        return False
    ok, reason = real_data_status(name)
    if not ok:
        if source == "tfds":
            raise DataUnavailableError(
                f"COURSE_DATA=tfds needs the real {name} data, but {reason}. Connect this machine "
                f"to the internet, or copy a prepared {name} folder into {data_dir()} (or point "
                f"TFDS_DATA_DIR at one), or set COURSE_DATA=auto to fall back to a synthetic "
                f"stand-in."
            )
        _announce_stand_in(name, reason)
    return ok


def stand_in(name: str, split: str):
    """The synthetic stand-in as `tfds.load(name, split=split, as_supervised=True)` returns the
    real data: (uint8 image, int64 label) pairs, unscaled. `split` is "train", "test", or the
    first examples of one, "train[:2048]".

    >>> stand_in("mnist", "test[:512]").cardinality().numpy()
    512
    """
    info = spec(name)
    base, _, rest = split.partition("[")
    if base not in info.split_sizes or (rest and not rest.startswith(":")):
        raise ValueError(
            f"stand_in({name!r}, {split!r}): use one of {', '.join(info.split_sizes)}, "
            "optionally with its first N examples, e.g. 'train[:2048]'."
        )
    count = int(rest[1:-1]) if rest else info.split_sizes[base]
    images, labels = synthetic_arrays(name, base, min(count, info.split_sizes[base]))
    return tf.data.Dataset.from_tensor_slices((images, labels))


_status: dict[str, tuple[bool, str]] = {}  # per process: offline, every load would wait again


def real_data_status(name: str) -> tuple[bool, str]:
    """(True, where) when the real data is on disk or its server answers; else (False, why).

    The answer is remembered for the rest of the process (a kernel restart asks again).
    """
    if name not in _status:
        info = spec(name)
        try:
            prepared = is_prepared(name)
        except Exception as exc:  # noqa: BLE001 - any failure means tfds cannot serve the data
            # Seen on Colab's Python 3.13 image: tensorflow-metadata's protos need a newer
            # protobuf than the runtime's, and `import tensorflow_datasets` comes back empty.
            _status[name] = (
                False,
                (
                    f"tensorflow-datasets does not work in this environment "
                    f"({type(exc).__name__}: {str(exc)[:160]})"
                ),
            )
            return _status[name]
        if prepared:
            _status[name] = True, "prepared on disk"
        elif can_reach(info.download_host):
            _status[name] = True, f"{info.download_host} is reachable"
        else:
            _status[name] = (
                False,
                f"it is not on disk and {info.download_host} did not answer within "
                f"{NETWORK_TIMEOUT_S:.0f} s",
            )
    return _status[name]


def is_prepared(name: str) -> bool:
    """Whether tensorflow-datasets has `name` prepared in its data folder (TFDS_DATA_DIR)."""
    return tfds_builder(name).is_prepared()


def tfds_builder(name: str):
    """The tensorflow-datasets builder that provides `name`.

    For SVHN: a prepared full `svhn_cropped` when there is one, else a builder that downloads
    only the train and test files (235 MiB instead of 1.5 GiB: tfds's own also fetches the
    531,131-image `extra` split, which the course does not use).
    """
    import tensorflow_datasets as tfds

    builder = tfds.builder(name)
    if name == "svhn_cropped" and not builder.is_prepared():
        builder = _svhn_train_test_class()()
    return builder


@functools.cache  # tfds registers a builder class by name when it is defined: define it once
def _svhn_train_test_class():
    import tensorflow_datasets as tfds

    svhn_cropped = tfds.builder_cls("svhn_cropped")

    class SvhnCroppedTrainTest(svhn_cropped):
        """tfds's svhn_cropped, same features and version, without the `extra` split."""

        url_infos = svhn_cropped.url_infos  # tfds's recorded sizes and checksums of the files

        def _split_generators(self, dl_manager):
            base = "http://ufldl.stanford.edu/housenumbers/"
            files = dl_manager.download(
                {split: f"{base}{split}_32x32.mat" for split in ("train", "test")}
            )
            return [
                tfds.core.SplitGenerator(
                    name=split, gen_kwargs=dict(split_prefix=f"{split}_", filepath=files[split])
                )
                for split in ("train", "test")
            ]

    return SvhnCroppedTrainTest


def can_reach(host: str, port: int = 443, timeout: float = NETWORK_TIMEOUT_S) -> bool:
    """Whether a TCP connection to host:port opens within `timeout` seconds (DNS included)."""
    result: list[bool] = []

    def attempt() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                result.append(True)
        except OSError:
            result.append(False)

    # A thread, because socket timeouts do not cover the DNS look-up, which can hang offline.
    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(result and result[0])


_announced: set[str] = set()


def _announce_stand_in(name: str, reason: str) -> None:
    if name not in _announced:
        _announced.add(name)
        print(
            f"COURSE_DATA=auto: {name} is not available ({reason}); using a synthetic stand-in "
            f"with the same shapes and classes."
        )


def _scale(image, label):
    return tf.cast(image, tf.float32) / 255.0, tf.cast(label, tf.int64)


def _load_tfds(name: str, split: str, limit: int | None):
    builder = tfds_builder(name)
    if not builder.is_prepared():
        print(f"Downloading and preparing {name} once, into {builder.data_dir} ...")
    builder.download_and_prepare()
    dataset = builder.as_dataset(split=split, as_supervised=True)
    if limit is not None:
        dataset = dataset.take(limit)
    return dataset.map(_scale)


def synthetic_arrays(
    name: str, split: str, num_examples: int, seed: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """uint8 images and int64 labels shaped like `name`, with a learnable class structure.

    Each class has a fixed smooth random pattern (shared by both splits, so a model trained on
    "train" is tested fairly on "test"). An example blends its class pattern with another class's
    pattern and adds noise, so a small CNN learns most of it in a few epochs (about 90%
    accuracy), not instantly.
    """
    info = spec(name)
    height, width, channels = info.image_shape
    class_rng = np.random.default_rng(zlib.crc32(name.encode()))
    coarse = class_rng.random((info.num_classes, height // 4, width // 4, channels))
    patterns = np.kron(coarse, np.ones((1, 4, 4, 1))).astype(
        np.float32
    )  # upsample to full size: smooth blocks

    rng = np.random.default_rng(zlib.crc32(f"{name}/{split}".encode()) if seed is None else seed)
    labels = rng.integers(0, info.num_classes, size=num_examples)
    others = (labels + rng.integers(1, info.num_classes, size=num_examples)) % info.num_classes
    images = np.empty((num_examples, height, width, channels), dtype=np.uint8)
    for start in range(0, num_examples, 4096):  # in chunks: full-size SVHN would need GBs at once
        end = min(start + 4096, num_examples)
        weight = rng.uniform(0.5, 0.7, size=(end - start, 1, 1, 1)).astype(np.float32)
        noise = rng.normal(0.0, 0.3, size=(end - start, height, width, channels)).astype(np.float32)
        blend = (
            weight * patterns[labels[start:end]]
            + (1 - weight) * patterns[others[start:end]]
            + noise
        )
        images[start:end] = (np.clip(blend, 0, 1) * 255).astype(np.uint8)
    return images, labels.astype(np.int64)


def synthetic_dataset(name: str, split: str, num_examples: int):
    """The stand-in as a tf.data.Dataset of (float32 image in [0, 1], int64 label)."""
    images, labels = synthetic_arrays(name, split, num_examples)
    return tf.data.Dataset.from_tensor_slices((images, labels)).map(_scale)


def data_dir() -> str:
    """Where tensorflow-datasets keeps prepared datasets."""
    return os.environ.get("TFDS_DATA_DIR", os.path.expanduser("~/tensorflow_datasets"))
