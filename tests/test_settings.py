import pytest

from course_utils.settings import Settings, SettingsError, check_simulated_devices, read_settings


def test_defaults_leave_the_profile_and_devices_to_setup():
    # course_utils.setup() resolves them (tests/test_devices.py checks its choice without a GPU).
    assert read_settings({}) == Settings(profile="auto", devices=None, data="auto")


def test_pick_gives_each_profile_its_value():
    def pick(profile, **values):
        return read_settings({"COURSE_PROFILE": profile}).pick(**values)

    assert [pick(p, full=12, cpu=6, quick=3) for p in ("full", "cpu", "quick", "auto")] == [
        12,
        6,
        3,
        12,
    ]
    assert pick("cpu", full=12, quick=3) == 12  # no cpu value: the full one


def test_environment_is_read_and_normalised():
    s = read_settings(
        {"COURSE_PROFILE": " Quick ", "COURSE_DEVICES": "4", "COURSE_DATA": "SYNTHETIC"}
    )
    assert (s.profile, s.devices, s.data) == ("quick", 4, "synthetic")
    assert s.pick(full=12, quick=2) == 2
    assert Settings().pick(full=12, quick=2) == 12


def test_arguments_override_the_environment():
    s = read_settings({"COURSE_PROFILE": "quick", "COURSE_DEVICES": "4"}, profile="full", devices=2)
    assert (s.profile, s.devices) == ("full", 2)


@pytest.mark.parametrize(
    "env, message",
    [
        ({"COURSE_PROFILE": "fast"}, "full, cpu, quick"),
        ({"COURSE_DATA": "kaggle"}, "auto, tfds, synthetic"),
        ({"COURSE_DEVICES": "two"}, "whole number"),
        ({"COURSE_DEVICES": "0"}, "at least 1"),
    ],
)
def test_bad_values_say_what_is_accepted(env, message):
    with pytest.raises(SettingsError, match=message):
        read_settings(env)


def test_simulated_devices_are_the_counts_the_course_is_checked_at():
    assert [check_simulated_devices(n) for n in (1, 8)] == [1, 8]
    for n in (9, 16):
        with pytest.raises(SettingsError) as error:
            check_simulated_devices(n)
        message = str(error.value)
        assert f"COURSE_DEVICES={n}:" in message and "1 to 8" in message
        assert "does not split into equal slices per replica" in message  # why
