"""TrainingApp in local mode (no cluster), in this process: the loop, checkpoints and
resume, progress lines, the export layout and its serving signature, exit codes."""

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

from airflow_tfk.runtime import app as app_mod
from airflow_tfk.runtime.app import TrainingApp, infer_mode, next_version
from airflow_tfk.runtime.cluster import TaskInfo
from airflow_tfk.runtime.examples.digits_app import DigitsApp
from airflow_tfk.runtime.progress import last_event, parse_line


@pytest.fixture(autouse=True)
def tensorflow():
    """TensorFlow is imported by this module's first test, not when pytest collects it:
    under ``-n 2`` only the process that runs these tests pays its start-up (~6 CPU-seconds)."""
    return pytest.importorskip("tensorflow")


@pytest.fixture(autouse=True)
def no_cluster(monkeypatch):
    for var in list(os.environ):
        if var == "TF_CONFIG" or var.startswith("TFK_"):
            monkeypatch.delenv(var)


def progress_of(out):
    return [p for p in map(parse_line, out.splitlines()) if p is not None]


def test_infer_mode():
    assert infer_mode(None) == "local"
    both = {"chief": ["c:1"], "ps": ["p:1"], "worker": ["w:1"]}
    assert infer_mode(TaskInfo(both, "chief", 0)) == "parameter_server"
    assert infer_mode(TaskInfo({"ps": ["p:1"], "worker": ["w:1"]}, "worker", 0)) == "between_graph"
    assert infer_mode(TaskInfo({"worker": ["w:1", "w:2"]}, "worker", 0)) == "all_reduce"
    assert infer_mode(TaskInfo(both, "chief", 0, mode="all_reduce")) == "all_reduce"
    with pytest.raises(app_mod.UsageError):
        infer_mode(TaskInfo(both, "chief", 0, mode="mirrored"))


def test_next_version(tmp_path):
    assert next_version(str(tmp_path / "missing")) == 1
    for name in ("1", "7", ".tmp-8-x", "notes", ".failed-11-ab12"):
        (tmp_path / name).mkdir()
    assert next_version(str(tmp_path)) == 8  # a set-aside export's number is given out again


def test_concurrent_exports_each_claim_their_own_small_version(tmp_path):
    """Writers that finish at the same moment, each choosing "the next version": the rename
    is the claim, so each gets its own number, and the numbers are 1..N."""
    import threading

    from airflow_tfk.runtime.export import publish_version

    models = tmp_path / "m"
    models.mkdir()
    start, got, lock = threading.Barrier(8), [], threading.Lock()

    def writer(i: int) -> None:
        tmp = models / f".tmp-export-{i}"
        tmp.mkdir()
        (tmp / "saved_model.pb").write_text(str(i))
        start.wait()
        version, final = publish_version(str(tmp), str(models), None)
        with lock:
            got.append((version, (Path(final) / "saved_model.pb").read_text()))

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(v for v, _ in got) == list(range(1, 9))
    assert sorted(w for _, w in got) == [str(i) for i in range(8)]  # nothing overwritten
    tmp = models / ".tmp-export-x"
    tmp.mkdir()
    (tmp / "f").write_text("x")
    with pytest.raises(app_mod.UsageError, match="already exists"):
        publish_version(str(tmp), str(models), 3)  # an explicit version is never bumped


def test_train_checkpoint_resume_and_export(tmp_path, capsys):
    common = [
        "--tfk_progress_every",
        "50",
        "--tfk_checkpoint_every",
        "100",
        "--tfk_export_dir",
        str(tmp_path / "models"),
        "--tfk_checkpoint_dir",
        str(tmp_path / "ckpt"),
        "--tfk_seed",
        "1",
    ]
    assert DigitsApp().run(["--tfk_steps", "200", *common]) == 0
    out = capsys.readouterr().out
    steps = [(p.step, p.status) for p in progress_of(out)]
    assert steps == [
        (0, "running"),
        (50, "running"),
        (100, "running"),
        (150, "running"),
        (200, "running"),
        (200, "done"),
    ]
    assert all(p.loss is not None for p in progress_of(out)[1:])
    assert last_event(out, "metrics")["accuracy"] >= 0.85
    export = last_event(out, "export")
    version_dir = tmp_path / "models" / "digits" / "1"
    assert export == {"path": str(version_dir), "model_name": "digits", "version": 1}
    assert (version_dir / "saved_model.pb").is_file()
    assert [p.name for p in (tmp_path / "models" / "digits").iterdir()] == ["1"]  # no tmp left

    # the sample request is a TF Serving REST predict body that the signature answers
    request = json.loads((version_dir / "assets.extra" / "tfk_sample_request.json").read_text())
    assert np.asarray(request["instances"]).shape == (3, 64)
    import tensorflow as tf

    loaded = tf.saved_model.load(str(version_dir))
    fn = loaded.signatures["serving_default"]
    result = fn(tf.constant(request["instances"], tf.float32))
    assert set(result) == {"logits", "probabilities", "classes"}
    assert result["classes"].shape == (3,)
    np.testing.assert_allclose(result["probabilities"].numpy().sum(axis=1), 1.0, rtol=1e-5)
    metrics = json.loads((version_dir / "assets.extra" / "tfk_metrics.json").read_text())
    assert metrics["accuracy"] >= 0.85
    # what wrote it, for the publish's check of the server's TensorFlow
    written = json.loads((version_dir / "assets.extra" / "tfk_export.json").read_text())
    assert written == {"tensorflow": tf.__version__}
    # the warm-up record is the sample request, as TF Serving reads it
    from tensorflow_serving.apis import prediction_log_pb2

    warm = version_dir / "assets.extra" / "tf_serving_warmup_requests"
    records = [r.numpy() for r in tf.data.TFRecordDataset(str(warm))]
    assert len(records) == 1
    logged = prediction_log_pb2.PredictionLog.FromString(records[0]).predict_log.request
    assert (logged.model_spec.name, logged.model_spec.signature_name) == ("digits", "serving_default")
    assert list(logged.inputs) == ["inputs"]
    np.testing.assert_allclose(tf.make_ndarray(logged.inputs["inputs"]), request["instances"], rtol=1e-6)

    # a second run with more steps resumes at the checkpoint and exports version 2
    assert DigitsApp().run(["--tfk_steps", "300", *common]) == 0
    out = capsys.readouterr().out
    steps = [(p.step, p.status) for p in progress_of(out)]
    assert steps[0] == (200, "running") and steps[-1] == (300, "done")
    assert last_event(out, "export")["version"] == 2


class Broken(TrainingApp):
    def build_model(self):
        import keras

        return keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])

    def dataset(self, input_context):
        import tensorflow as tf

        return tf.data.Dataset.from_tensors((tf.zeros([4, 2]), tf.zeros([4, 1]))).repeat()

    def loss(self, labels, outputs):
        raise ValueError("bug in the app")


def test_app_error_is_exit_1_with_a_failed_progress_line(capsys):
    assert Broken().run(["--tfk_steps", "10"]) == app_mod.EXIT_APP_ERROR
    captured = capsys.readouterr()
    assert progress_of(captured.out)[-1].status == "failed"
    assert "bug in the app" in captured.err


def test_sync_is_rejected_in_parameter_server_mode(monkeypatch, capsys):
    monkeypatch.setenv(
        "TFK_CLUSTER",
        json.dumps({"chief": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"], "worker": ["127.0.0.1:3"]}),
    )
    monkeypatch.setenv("TFK_ROLE", "chief")
    monkeypatch.setenv("TFK_INDEX", "0")
    assert Broken().run(["--tfk_sync"]) == app_mod.EXIT_USAGE
    assert "asynchronous only" in capsys.readouterr().err


def test_bad_cluster_environment_is_exit_2(monkeypatch, capsys):
    monkeypatch.setenv("TFK_CLUSTER", "{broken")
    assert Broken().run([]) == app_mod.EXIT_USAGE
    assert "TFK_CLUSTER is not valid JSON" in capsys.readouterr().err


def test_app_flags_and_unknown_arguments():
    app = DigitsApp()
    app.parse(["--hidden", "16", "--tfk_steps", "5", "--something", "else"])
    assert app.args.hidden == 16 and app.flags.steps == 5
    assert app.extra_argv == ["--something", "else"]
    assert app.flags.model_name == "digits"


@pytest.mark.parametrize(
    "mode, flag, roles",
    [("all_reduce", "--tfk_async", {"worker": 2})],
)
def test_sync_async_must_fit_the_mode(monkeypatch, capsys, mode, flag, roles):
    cluster = {r: [f"127.0.0.1:{i + 1}" for i in range(n)] for r, n in roles.items()}
    monkeypatch.setenv("TFK_CLUSTER", json.dumps(cluster))
    monkeypatch.setenv("TFK_ROLE", "worker")
    monkeypatch.setenv("TFK_INDEX", "0")
    monkeypatch.setenv("TFK_MODE", mode)
    assert Broken().run([flag]) == app_mod.EXIT_USAGE
    assert "all_reduce" in capsys.readouterr().err


def test_tensorboard_summaries(tmp_path, capsys):
    assert (
        DigitsApp().run(
            ["--tfk_steps", "20", "--tfk_progress_every", "10", "--tfk_log_dir", str(tmp_path / "logs")]
        )
        == 0
    )
    events = list((tmp_path / "logs").rglob("events.out.tfevents.*"))
    assert events and events[0].parent == tmp_path / "logs" / "digits" / "local"
    assert last_event(capsys.readouterr().out, "export") is None  # no export dir: no export


class AbortedAfterResume(TrainingApp):
    """A loop that resumes, then meets what a preemption leaves on the ps: TF's duplicate
    RunGraph abort (CI's cold run once failed on it)."""

    def build_model(self):  # pragma: no cover - train() is the app's own
        raise AssertionError

    def dataset(self, input_context):  # pragma: no cover
        raise AssertionError

    #: steps trained after the resume before the abort, and seconds they take
    after_steps = 0
    seconds_per_step = 0.0

    def train(self):
        import tensorflow as tf

        self.resumed(5)
        for step in range(6, 6 + self.after_steps):
            self.report(step)
            time.sleep(self.seconds_per_step)
        raise tf.errors.AbortedError(None, None, "The same RunGraph (Worker) request was received twice")


def test_a_transient_error_right_after_a_restart_on_notice_is_restarted_once_more(tmp_path, capsys):
    from airflow_tfk.runtime import notice

    args = ["--tfk_steps", "10", "--tfk_checkpoint_dir", str(tmp_path)]
    notice.record_stop(str(tmp_path), "local", 7, 1000.0, "notice")  # the previous attempt
    assert AbortedAfterResume().run(args) == app_mod.EXIT_PREEMPTED  # restarted, not counted
    err = capsys.readouterr().err
    assert "a transient error right after a restart on notice (AbortedError: " in err
    assert "Traceback" not in err
    # That attempt recorded an error: the next one gets no second pass, nor does a first one.
    assert AbortedAfterResume().run(args) == app_mod.EXIT_RETRYABLE
    assert AbortedAfterResume().run(args) == app_mod.EXIT_RETRYABLE
    assert "Traceback" in capsys.readouterr().err


def test_the_pass_after_a_restart_on_notice_covers_the_first_steps_not_later_ones(
    tmp_path, capsys, monkeypatch
):
    """CI saw the abort two steps after the resumed attempt trained again: the pass holds
    for the attempt's first moments of training, and ends once they are over."""
    from airflow_tfk.runtime import notice

    args = ["--tfk_steps", "100", "--tfk_checkpoint_dir", str(tmp_path)]

    class AFewStepsIn(AbortedAfterResume):
        after_steps = 3

    notice.record_stop(str(tmp_path), "local", 7, 1000.0, "notice")
    assert AFewStepsIn().run(args) == app_mod.EXIT_PREEMPTED
    err = capsys.readouterr().err
    assert "training again at step 6" in err
    assert "a transient error right after a restart on notice (AbortedError: " in err

    monkeypatch.setattr(notice.Recovery, "SETTLING_SECONDS", 0.2)

    class SettledFirst(AbortedAfterResume):
        after_steps, seconds_per_step = 3, 0.15

    notice.record_stop(str(tmp_path), "local", 7, 1000.0, "notice")
    assert SettledFirst().run(args) == app_mod.EXIT_RETRYABLE  # a failure like any other
    err = capsys.readouterr().err
    assert "right after a restart on notice" not in err
    assert "Traceback" in err
