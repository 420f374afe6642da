"""Simulated devices: the right count, idempotent set-up, and a clear error when it is too late."""


def test_setup_simulates_the_requested_cpu_devices(python_subprocess):
    proc = python_subprocess(
        """
        import course_utils
        s = course_utils.setup(devices=4)
        s2 = course_utils.setup(devices=4)          # re-running the set-up cell is harmless
        import tensorflow as tf
        print("N", s.devices, s2.devices, len(tf.config.list_logical_devices("CPU")))
        print([d.name for d in tf.config.list_logical_devices("CPU")])
        """
    )
    assert "N 4 4 4" in proc.stdout
    assert "/device:CPU:3" in proc.stdout
    assert "devices=4 logical CPU" in proc.stdout


def test_default_is_two_simulated_cpus_and_the_cpu_profile_without_a_gpu(python_subprocess):
    proc = python_subprocess(
        """
        import os, course_utils
        s = course_utils.setup()
        print("N", s.devices, s.profile, os.environ["COURSE_PROFILE"])
        """,
        env={"COURSE_DEVICES": "", "COURSE_PROFILE": ""},
    )
    assert "N 2 cpu cpu" in proc.stdout
    assert "profile=cpu" in proc.stdout and "COURSE_PROFILE=full forces" in proc.stdout


def test_tf_cpp_min_log_level_0_shows_tensorflows_logs(python_subprocess):
    proc = python_subprocess(
        """
        import course_utils
        course_utils.setup(devices=1, verbose=False)
        import tensorflow as tf
        print("LEVEL", tf.get_logger().getEffectiveLevel())
        """,
        env={"TF_CPP_MIN_LOG_LEVEL": "0"},
    )
    assert "LEVEL 40" not in proc.stdout  # 40 = ERROR, the level the quiet start-up sets
    assert "LEVEL" in proc.stdout


def test_too_late_error_says_restart_the_kernel(python_subprocess):
    proc = python_subprocess(
        """
        import course_utils
        import tensorflow as tf
        tf.constant(1.0) + 1.0                      # TensorFlow initialises its devices here
        try:
            course_utils.setup(devices=2)
        except course_utils.devices.DeviceSetupTooLateError as exc:
            print("ERROR:", exc)
        """
    )
    assert "ERROR:" in proc.stdout
    assert "Restart the kernel" in proc.stdout and "run the set-up cell first" in proc.stdout


def test_changing_the_count_after_setup_is_refused(python_subprocess):
    proc = python_subprocess(
        """
        import course_utils
        course_utils.setup(devices=4)
        import tensorflow as tf
        tf.constant(1.0)
        try:
            course_utils.setup(devices=2)
        except course_utils.devices.DeviceSetupTooLateError as exc:
            print("ERROR:", exc)
        """
    )
    assert "ERROR: Cannot set up 2 CPU devices: TensorFlow already started with 4" in proc.stdout


def test_no_tensorflow_start_up_noise_on_stderr(python_subprocess):
    proc = python_subprocess("import course_utils; course_utils.setup(devices=2, verbose=False)")
    noise = [line for line in proc.stderr.splitlines() if line.strip()]
    assert noise == [], noise


def test_more_simulated_devices_than_checked_fail_before_tensorflow_starts(python_subprocess):
    # COURSE_DEVICES=9 used to start, and notebook 1's fit failed on its first validation batch.
    proc = python_subprocess(
        """
        import os, course_utils
        from course_utils.settings import SettingsError
        try:
            course_utils.setup(verbose=False)
        except SettingsError as exc:
            print("ERROR:", exc)
        os.environ["COURSE_DEVICES"] = "8"            # fixed, the set-up cell runs again
        s = course_utils.setup(verbose=False)
        import tensorflow as tf
        print("N", s.devices, len(tf.config.list_logical_devices("CPU")))
        """,
        env={"COURSE_DEVICES": "9"},
    )
    assert "ERROR: COURSE_DEVICES=9: simulate 1 to 8 CPU devices" in proc.stdout
    assert "N 8 8" in proc.stdout  # nothing was lost: no kernel restart needed
