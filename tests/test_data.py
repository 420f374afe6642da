"""Datasets: shapes and scaling, the offline stand-in (fast, announced, learnable), tfds mode, tfds
mocking."""

import re
import tempfile
import time

import numpy as np
import pytest

from course_utils import data
from course_utils.settings import Settings

QUICK_AUTO = Settings(profile="quick", data="auto")


@pytest.fixture
def offline(monkeypatch):
    """No dataset on disk and no server answering, whatever the machine running the tests has."""
    monkeypatch.setattr(data, "is_prepared", lambda name: False)
    monkeypatch.setattr(data, "can_reach", lambda host, port, **kw: False)
    data._announced.clear()
    data.real_data_status.cache_clear()


@pytest.mark.parametrize("name", sorted(data.SPECS))
def test_synthetic_matches_the_real_format(name):
    spec = data.spec(name)
    ds = data.load(name, "train", limit=16, source="synthetic")
    image_spec, label_spec = ds.element_spec
    assert tuple(image_spec.shape) == spec.image_shape and image_spec.dtype.name == "float32"
    assert label_spec.dtype.name == "int64" and tuple(label_spec.shape) == ()
    images, labels = next(iter(ds.batch(16)))
    assert 0.0 <= float(np.min(images)) and float(np.max(images)) <= 1.0
    assert set(labels.numpy()) <= set(range(spec.num_classes))


def test_synthetic_is_deterministic_and_splits_differ():
    a, _ = data.synthetic_arrays("mnist", "train", 32)
    b, _ = data.synthetic_arrays("mnist", "train", 32)
    c, _ = data.synthetic_arrays("mnist", "test", 32)
    assert np.array_equal(a, b) and not np.array_equal(a, c)


@pytest.mark.parametrize(
    "profile, expected",
    [("quick", data.QUICK_EXAMPLES), ("cpu", data.CPU_EXAMPLES), ("full", {"test": 10000})],
)
def test_each_profile_loads_its_size(profile, expected):
    for split, size in expected.items():
        ds = data.load("fashion_mnist", split, source="synthetic", settings=Settings(profile))
        assert int(ds.cardinality()) == size, (profile, split)


def test_unknown_names_are_clear():
    with pytest.raises(ValueError, match="mnist, fashion_mnist, svhn_cropped"):
        data.load("cifar10", "train")
    with pytest.raises(ValueError, match="train, test"):
        data.load("mnist", "validation", source="synthetic")


def test_auto_offline_falls_back_in_one_line(offline, capsys):
    ds = data.load("mnist", "train", settings=QUICK_AUTO)
    ds2 = data.load("mnist", "test", settings=QUICK_AUTO)
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "synthetic stand-in" in out[0] and "mnist" in out[0]
    assert (
        int(ds.cardinality()) == data.QUICK_EXAMPLES["train"]
        and int(ds2.cardinality()) == data.QUICK_EXAMPLES["test"]
    )


def test_auto_offline_checks_the_network_once_per_process(offline, monkeypatch):
    calls = []
    monkeypatch.setattr(data, "can_reach", lambda *address, **kw: calls.append(address) or False)
    data.load("mnist", "train", settings=QUICK_AUTO)
    data.load("mnist", "test", settings=QUICK_AUTO)
    assert calls == [("storage.googleapis.com", 443)]


def test_the_download_servers_are_asked_on_the_port_tensorflow_datasets_uses():
    """fashion-mnist's S3 website endpoint serves plain HTTP only: port 443 never answers."""
    addresses = {name: spec.download_address for name, spec in data.SPECS.items()}
    assert addresses == {
        "mnist": ("storage.googleapis.com", 443),
        "fashion_mnist": ("fashion-mnist.s3-website.eu-central-1.amazonaws.com", 80),
        "svhn_cropped": ("ufldl.stanford.edu", 80),
    }
    import tensorflow_datasets as tfds

    assert tfds.builder_cls("fashion_mnist").URL == data.spec("fashion_mnist").download_url


def test_tfds_mode_offline_is_a_clear_error(offline):
    with pytest.raises(data.DataUnavailableError, match="COURSE_DATA=auto"):
        data.load("svhn_cropped", "train", source="tfds")


def test_offline_detection_on_this_machine_is_fast():
    """The real check, no mocks: whatever the network does, the answer comes within seconds."""
    data.real_data_status.cache_clear()
    started = time.perf_counter()
    ok, reason = data.real_data_status("mnist")
    assert time.perf_counter() - started < data.NETWORK_TIMEOUT_S + 2
    # Whichever way it went, the reason names where the data is (or why it is not there).
    assert re.fullmatch(
        r"prepared on disk|\S+ is reachable|it is not on disk and \S+ did not answer within \d+ s",
        reason,
    ), reason


def test_can_reach_a_local_server_and_not_a_closed_port():
    import socket

    import portpicker

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert data.can_reach("127.0.0.1", server.getsockname()[1], timeout=2)
    assert not data.can_reach("127.0.0.1", portpicker.pick_unused_port(), timeout=2)


@pytest.mark.parametrize("name", sorted(data.SPECS))
def test_tfds_code_path_with_tfds_mocking(monkeypatch, name):
    import tensorflow_datasets as tfds

    monkeypatch.setattr(data, "is_prepared", lambda name: True)
    data.real_data_status.cache_clear()
    with tfds.testing.mock_data(num_examples=20):
        ds = data.load(name, "train", source="tfds", settings=Settings(profile="quick"))
        images, labels = next(iter(ds.batch(20)))
    assert images.shape == (20, *data.spec(name).image_shape) and images.dtype.name == "float32"
    assert 0.0 <= float(np.min(images)) and float(np.max(images)) <= 1.0
    assert labels.dtype.name == "int64"


@pytest.mark.parametrize("name", ["mnist", "svhn_cropped"])
def test_synthetic_data_is_learnable(name):
    """A small CNN beats chance by far after two short epochs, so the course's curves go up."""
    import keras

    keras.utils.set_random_seed(0)
    spec = data.spec(name)
    train = data.load(name, "train", limit=1024, source="synthetic").batch(64)
    test = data.load(name, "test", limit=256, source="synthetic").batch(64)
    model = keras.Sequential(
        [
            keras.Input(spec.image_shape),
            keras.layers.Conv2D(16, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Flatten(),
            keras.layers.Dense(spec.num_classes),
        ]
    )
    model.compile(
        "adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"]
    )
    model.fit(train, epochs=2, verbose=0)
    _, accuracy = model.evaluate(test, verbose=0)
    assert accuracy > 0.6, f"synthetic {name} test accuracy {accuracy:.2f} (chance is 0.10)"


def test_svhn_downloads_only_train_and_test(monkeypatch, tmp_path):
    """tfds's svhn_cropped also fetches the 1.24 GiB `extra` split; the course's does not."""
    monkeypatch.setenv("TFDS_DATA_DIR", str(tmp_path))
    builder = data.tfds_builder("svhn_cropped")
    asked = {}

    class RecordingDownloads:
        def download(self, urls):
            asked.update(urls)
            return {split: tmp_path / f"{split}.mat" for split in urls}

    splits = builder._split_generators(RecordingDownloads())
    assert [s.name for s in splits] == ["train", "test"]
    assert sorted(asked) == ["test", "train"] and all(
        url.endswith(f"/{k}_32x32.mat") for k, url in asked.items()
    )
    assert set(asked.values()) <= set(builder.url_infos), (
        "tfds's checksums cover the files asked for"
    )
    assert (
        builder.info.features["image"].shape == (32, 32, 3)
        and builder.info.features["label"].num_classes == 10
    )


def test_a_dataset_not_prepared_gets_one_tfds_builder_per_process(monkeypatch, tmp_path):
    """tfds leaves an empty tmp*tfds folder in the temporary folder for each builder of a dataset
    not prepared (DatasetInfo.initialize_from_bucket): checks and loads repeated in one process
    leave one per dataset, not one per call (the course's runs and tests left ~1,000 a day)."""
    monkeypatch.setenv("TFDS_DATA_DIR", str(tmp_path / "data"))
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    for _ in range(3):
        for name in ("mnist", "svhn_cropped"):
            assert not data.is_prepared(name)
            assert data.tfds_builder(name) is data.tfds_builder(name)
    assert len(list(temporary.glob("tmp*tfds"))) == 2


def test_a_broken_tensorflow_datasets_falls_back_with_the_reason(monkeypatch, capsys):
    """An environment whose tfds import is broken (seen with mismatched protobuf) still runs."""

    def broken(name):
        raise AttributeError("module 'tensorflow_datasets' has no attribute 'builder'")

    monkeypatch.setattr(data, "is_prepared", broken)
    data.real_data_status.cache_clear()
    data._announced.clear()
    ds = data.load("mnist", "test", settings=QUICK_AUTO)
    assert int(ds.cardinality()) == data.QUICK_EXAMPLES["test"]
    assert "tensorflow-datasets does not work in this environment" in capsys.readouterr().out
    with pytest.raises(data.DataUnavailableError, match="has no attribute 'builder'"):
        data.load("mnist", "test", source="tfds")


@pytest.mark.parametrize("name", ["mnist", "fashion_mnist"])
def test_the_stand_in_looks_like_the_real_data(monkeypatch, name):
    """`load` gives the same element spec from tensorflow-datasets (mocked) and offline, so a
    notebook's pipeline works on either."""
    import tensorflow_datasets as tfds

    monkeypatch.setattr(data, "is_prepared", lambda name: True)
    data.real_data_status.cache_clear()
    with tfds.testing.mock_data(num_examples=20):
        real = data.load(name, "test", limit=8, source="auto")
    fake = data.load(name, "test", limit=8, source="synthetic")
    assert fake.element_spec == real.element_spec
    assert int(fake.cardinality()) == 8


def test_use_real_data_follows_course_data(offline, capsys):
    assert not data.use_real_data("mnist", "synthetic") and capsys.readouterr().out == ""
    assert not data.use_real_data("mnist", "auto") and "stand-in" in capsys.readouterr().out
    with pytest.raises(data.DataUnavailableError, match="COURSE_DATA=auto"):
        data.use_real_data("mnist", "tfds")
