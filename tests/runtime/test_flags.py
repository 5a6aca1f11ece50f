import pytest

from airflow_tfk.runtime.flags import PlatformFlags, default_checkpoint_dir, parse_flags


def test_defaults_without_environment():
    flags, rest = parse_flags([], env={})
    assert flags == PlatformFlags()
    assert rest == []


def test_environment_defaults():
    env = {
        "TFK_DATA_DIR": "/tfk/data",
        "TFK_LOG_DIR": "/tfk/logs",
        "TFK_MODEL_DIR": "/tfk/models",
        "TFK_CLUSTER_NAME": "mnist-1",
    }
    flags, _ = parse_flags([], env=env, model_name="mnist")
    assert flags.data_dir == "/tfk/data" and flags.log_dir == "/tfk/logs"
    assert flags.export_dir == "/tfk/models" and flags.model_name == "mnist"
    assert flags.checkpoint_dir == "/tfk/models/.checkpoints/mnist-1"
    # flags win over the environment
    flags, _ = parse_flags(
        ["--tfk_log_dir", "/x", "--tfk_checkpoint_dir", "/c", "--tfk_model_name", "other"],
        env=env,
        model_name="mnist",
    )
    assert (flags.log_dir, flags.checkpoint_dir, flags.model_name) == ("/x", "/c", "other")


def test_checkpoint_dir_falls_back_to_model_name():
    assert default_checkpoint_dir({"TFK_MODEL_DIR": "/m"}, "digits") == "/m/.checkpoints/digits"
    assert default_checkpoint_dir({}, "digits") is None


def test_user_flags_are_left_for_the_app_in_order():
    argv = [
        "--epochs",
        "3",
        "--tfk_steps=50",
        "data.csv",
        "--steps",
        "7",
        "--tfk_async",
        "--tfk_batch_size",
        "8",
        "-v",
    ]
    flags, rest = parse_flags(argv, env={})
    assert flags.steps == 50 and flags.batch_size == 8 and flags.sync is False
    assert rest == ["--epochs", "3", "data.csv", "--steps", "7", "-v"]


def test_all_platform_flags():
    flags, _ = parse_flags(
        [
            "--tfk_sync",
            "--tfk_checkpoint_every",
            "0",
            "--tfk_data_dir",
            "/d",
            "--tfk_export_dir",
            "/e",
            "--tfk_use_gpu",
            "--tfk_progress_every",
            "5",
            "--tfk_steps_per_call",
            "4",
            "--tfk_learning_rate",
            "0.1",
            "--tfk_model_version",
            "7",
            "--tfk_cluster_wait",
            "30",
            "--tfk_seed",
            "1",
        ],
        env={},
    )
    assert flags.sync is True and flags.checkpoint_every == 0 and flags.data_dir == "/d"
    assert flags.export_dir == "/e" and flags.use_gpu is True and flags.progress_every == 5
    assert flags.steps_per_call == 4 and flags.learning_rate == 0.1
    assert flags.model_version == 7 and flags.cluster_wait == 30 and flags.seed == 1
    assert parse_flags(["--tfk_no_gpu"], env={})[0].use_gpu is False


@pytest.mark.parametrize(
    "argv",
    [
        ["--tfk_stepz", "5"],  # typo of a platform flag: not passed to the app
        ["--tfk_step", "5"],  # no abbreviations
        ["--tfk_steps", "0"],
        ["--tfk_steps", "many"],
        ["--tfk_sync", "--tfk_async"],
        ["--tfk_learning_rate", "-1"],
    ],
)
def test_bad_platform_flags_exit_2(argv):
    with pytest.raises(SystemExit) as exc:
        parse_flags(argv, env={})
    assert exc.value.code == 2
