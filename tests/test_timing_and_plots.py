import time

import matplotlib

matplotlib.use("Agg")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from course_utils import plots, timing  # noqa: E402


def test_timer_measures_wall_time():
    with timing.Timer() as t:
        time.sleep(0.2)
    assert 0.19 < t.seconds < 2.0


def test_throughput_callback_records_epochs_and_steps():
    x, y = np.random.rand(100, 4).astype("float32"), np.random.randint(0, 2, 100)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    speed = timing.ThroughputCallback(batch_size=25)
    model.fit(x, y, batch_size=25, epochs=3, verbose=0, callbacks=[speed])
    assert len(speed.epoch_seconds) == 3 and speed.epoch_steps == [4, 4, 4]
    result = timing.RunResult.from_callback("fit", speed)
    assert result.epochs == 2 and result.examples == 200  # warm-up epoch left out
    assert result.examples_per_sec == pytest.approx(speed.examples_per_sec, rel=1e-6)


def test_run_result_table_and_chart():
    results = [timing.RunResult("one device", 10.0, 1000), timing.RunResult("mirrored", 20.0, 1000)]
    assert results[1].examples_per_sec == 50.0
    table = timing.results_table(results)
    assert "one device" in table and "1.00x" in table and "0.50x" in table and "100" in table
    ax = timing.plot_comparison(results)
    assert [bar.get_width() for bar in ax.patches] == [100.0, 50.0]


def test_plot_history_draws_train_and_validation():
    fig = plots.plot_history({"loss": [1.0, 0.5], "val_loss": [1.1, 0.7], "accuracy": [0.5, 0.8]})
    assert len(fig.axes) == 2
    assert [len(ax.lines) for ax in fig.axes] == [2, 1]
    with pytest.raises(ValueError, match="has"):
        plots.plot_history({"auc": [0.5]})
