"""make_strategy picks the right strategy; build_model_and_optimizer avoids the Adam trap; loss
scaling."""

import numpy as np
import pytest


def test_make_strategy_uses_all_simulated_devices(python_subprocess):
    proc = python_subprocess(
        """
        import course_utils
        course_utils.setup(devices=4, verbose=False)
        from course_utils.strategy import make_strategy
        auto = make_strategy()
        one = make_strategy("mirrored", devices=["/cpu:0"])
        default = make_strategy("default")
        print("R", auto.num_replicas_in_sync, type(auto).__name__,
              one.num_replicas_in_sync, type(one).__name__,
              default.num_replicas_in_sync)
        """
    )
    assert "R 4 MirroredStrategy 1 MirroredStrategy 1" in proc.stdout
    assert "MirroredStrategy: 4 replica(s) in sync" in proc.stdout


def test_one_device_gives_the_default_strategy(python_subprocess):
    proc = python_subprocess(
        """
        import course_utils
        course_utils.setup(devices=1, verbose=False)
        from course_utils.strategy import make_strategy
        print("T", type(make_strategy(verbose=False)).__name__)
        """
    )
    assert "T _DefaultDistributionStrategy" in proc.stdout


def test_built_adam_trains_a_distributed_step(python_subprocess):
    """Adam under 2 replicas fails unless the optimizer is built first (TF 2.20-2.21)."""
    proc = python_subprocess(
        """
        import course_utils
        course_utils.setup(devices=2, verbose=False)
        import keras, tensorflow as tf
        from course_utils.strategy import make_strategy, build_model_and_optimizer
        strategy = make_strategy(verbose=False)
        model, opt = build_model_and_optimizer(
            strategy,
            lambda: keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)]),
            keras.optimizers.Adam,
        )
        ds = strategy.experimental_distribute_dataset(
            tf.data.Dataset.from_tensor_slices((tf.ones((8, 3)), tf.zeros((8,), tf.int64))).batch(8)
        )

        @tf.function
        def step(batch):
            def replica_step(x, y):
                with tf.GradientTape() as tape:
                    per_example = keras.losses.sparse_categorical_crossentropy(
                        y, model(x), from_logits=True
                    )
                    loss = tf.reduce_sum(per_example) / 8
                variables = model.trainable_variables
                opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
                return loss
            return strategy.reduce("SUM", strategy.run(replica_step, args=batch), axis=None)

        print("LOSS", float(step(next(iter(ds)))), int(opt.iterations.numpy()))
        """
    )
    assert "LOSS" in proc.stdout and proc.stdout.strip().endswith(" 1")


def test_unbuilt_model_is_refused_with_advice(python_subprocess):
    proc = python_subprocess(
        """
        import course_utils
        course_utils.setup(devices=1, verbose=False)
        import keras
        from course_utils.strategy import make_strategy, build_model_and_optimizer
        try:
            build_model_and_optimizer(
                make_strategy(verbose=False),
                lambda: keras.Sequential([keras.layers.Dense(2)]),
                keras.optimizers.Adam,
            )
        except ValueError as exc:
            print("ERROR:", exc)
        """
    )
    assert "keras.Input" in proc.stdout


def test_scaled_loss_divides_by_the_global_batch():
    from course_utils.losses import scaled_loss

    per_example = np.array([1.0, 2.0, 3.0, 4.0], dtype="float32")  # this replica's 4 of a global 8
    assert float(scaled_loss(per_example, global_batch_size=8)) == pytest.approx(10 / 8)


def test_scaled_loss_averages_extra_label_axes_first():
    from course_utils.losses import scaled_loss

    per_pixel = np.ones((4, 3, 5), dtype="float32") * 2.0  # e.g. a loss per pixel
    # one number per example (2.0), summed over 4 examples, divided by the global batch of 8
    assert float(scaled_loss(per_pixel, global_batch_size=8)) == pytest.approx(1.0)


def test_regularization_is_divided_by_the_replicas(python_subprocess):
    proc = python_subprocess(
        """
        import course_utils
        course_utils.setup(devices=2, verbose=False)
        import tensorflow as tf
        from course_utils.losses import scaled_loss
        from course_utils.strategy import make_strategy
        strategy = make_strategy(verbose=False)
        fn = lambda: scaled_loss(tf.constant([1.0, 1.0]), 4, [tf.constant(0.5), tf.constant(0.5)])
        print("V", [float(v) for v in strategy.experimental_local_results(strategy.run(fn))])
        """
    )
    # each replica: 2/4 + (0.5 + 0.5)/2 = 1.0; summed over 2 replicas -> 2.0 = 4/4 + 1.0 as on one
    # device
    assert "V [1.0, 1.0]" in proc.stdout
