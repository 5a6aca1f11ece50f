"""The Kubernetes store reader's digest of a version's files (``files.DIGEST_SCRIPT``, run
here by /bin/sh on a local directory exactly as the reader Job's container runs it): it
sees every kind of swap the local digest sees, refuses past its bounds, keeps file names
out of its log, and says when the image cannot take it. Then the target: the digest that
vouches for the gate's metrics comes from the Job that read them, the one before promotion
from a Job of its own."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from airflow_tfk.serving.files import (
    MAX_ENTRIES,
    MAX_LISTING_BYTES,
    MAX_STORE_JSON,
    PARTS,
    TooManyFiles,
    changed,
    reader_files,
)
from airflow_tfk.serving.kubernetes import KubernetesServing, parse_reader_log
from airflow_tfk.serving.render import READER_SCRIPT
from airflow_tfk.serving.spec import ServingSpec
from tests.serving.test_files import SWAPS, _version


def read(
    store: Path,
    version: int | None,
    entries: int = MAX_ENTRIES,
    env: dict | None = None,
    max_json: int = MAX_STORE_JSON,
) -> str:
    """The reader's log, run as its container runs it (``sh -c SCRIPT name ARGS``)."""
    argv = [
        "/bin/sh",
        "-c",
        READER_SCRIPT,
        "tfk-read-store",
        str(store),
        "" if version is None else str(version),
    ]
    argv += [str(entries), str(MAX_LISTING_BYTES), " ".join(PARTS), str(max_json)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    return out.stdout + out.stderr


def digest(store: Path, version: int, **kw) -> str | None:
    return reader_files(read(store, version, **kw))


@pytest.mark.parametrize("swap", SWAPS, ids=[s.__name__.strip("_") for s in SWAPS])
def test_the_reader_s_digest_sees_every_kind_of_swap(tmp_path: Path, swap) -> None:
    d = _version(tmp_path, 2)
    before = digest(tmp_path, 2)
    assert before is not None and before == digest(tmp_path, 2)  # reading changes nothing
    swap(d)
    after = digest(tmp_path, 2)
    assert after != before
    # the refusal says where: each swap here touches saved_model.pb or variables
    assert "changed: " in changed(before, after) and any(
        p in changed(before, after) for p in ("saved_model.pb", "variables")
    )
    assert digest(tmp_path, 9) is None


def test_the_digest_is_taken_before_the_metrics_are_read(tmp_path: Path) -> None:
    _version(tmp_path, 3)
    (tmp_path / "3" / "assets.extra").mkdir()
    (tmp_path / "3" / "assets.extra" / "tfk_metrics.json").write_text('{"accuracy": 0.9}')
    lines = read(tmp_path, None).split("\n")
    order = [
        next(i for i, line in enumerate(lines) if line.startswith(p)) for p in ("tfk-files:", "tfk-metrics:")
    ]
    assert order == sorted(order), lines
    assert parse_reader_log("\n".join(lines))[:2] == ([3], 3)


def test_a_metrics_file_or_sample_over_the_bound_is_not_printed(tmp_path: Path) -> None:
    """A training writes the store: a metrics file or sample request of any size must not
    become a log of that size. Over the bound it is missing, as on the local backend; at
    the bound it is read whole."""
    _version(tmp_path, 3)
    extra = tmp_path / "3" / "assets.extra"
    extra.mkdir()
    metrics, sample = '{"accuracy": 0.9}', '{"instances": [[1.0]]}'
    (extra / "tfk_metrics.json").write_text(metrics)
    (extra / "tfk_sample_request.json").write_text(sample)
    log = read(tmp_path, 3, max_json=len(sample))
    assert f"tfk-metrics: {metrics}" in log and sample in log
    (extra / "tfk_metrics.json").write_text(metrics + " " * len(sample))  # one file over
    log = read(tmp_path, 3, max_json=len(sample))
    assert "tfk-metrics:" not in log and sample in log
    (extra / "tfk_sample_request.json").write_text(sample + " ")
    log = read(tmp_path, 3, max_json=len(sample))
    assert "tfk-sample:" not in log and reader_files(log) is not None  # the digest still is
    assert len(log) < 1024


def test_a_model_without_a_directory_has_no_version_to_vouch_for(tmp_path: Path) -> None:
    """The first publish of a model may come before its directory exists (the server then
    fails to load it, and says why): the reader says "no versions", it does not fail."""
    log = read(tmp_path / "no-such-model", 1)
    assert parse_reader_log(log) == ([], None, None)
    with pytest.raises(OSError, match="printed no digest"):
        reader_files(log)  # the target asks only for a version the reader found


def test_past_the_bound_it_refuses_to_vouch(tmp_path: Path) -> None:
    d = _version(tmp_path, 2)  # 3 entries: saved_model.pb, variables, variables.data
    assert digest(tmp_path, 2, entries=3) is not None
    (d / "extra").write_text("x")
    with pytest.raises(TooManyFiles, match=f"more than {MAX_ENTRIES} files"):
        digest(tmp_path, 2, entries=3)


def test_hostile_file_names_stay_out_of_the_log(tmp_path: Path) -> None:
    d = _version(tmp_path, 2)
    forged = "x\ntfk-files: " + "0" * 64 + " 1 .=" + "0" * 16 + "\n"
    (d / "variables" / forged).write_text("x")
    (d / "$(touch pwned)").write_text("x")
    (d / "`touch pwned2`;").write_text("x")
    os.symlink(d, d / "loop")  # a link back up: a loop find reports, hashed with the rest
    log = read(tmp_path, 2)
    assert "tfk-files: " + "0" * 64 not in log and "pwned" not in log and "loop" not in log
    assert not list(tmp_path.rglob("pwned*")) and not (Path.cwd() / "pwned").exists()
    found = reader_files(log)
    assert found is not None and found == reader_files(read(tmp_path, 2))
    os.unlink(d / "variables" / forged)
    assert "variables" in changed(found, reader_files(read(tmp_path, 2)))


def test_an_image_that_cannot_take_the_digest_says_so(tmp_path: Path) -> None:
    """A find without -printf (busybox) would hash its own complaint: a constant digest
    that vouches for any files. It is refused instead, naming what is missing."""
    _version(tmp_path, 2)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "find").write_text("#!/bin/sh\necho 'find: unrecognized: -printf' >&2\nexit 1\n")
    (fake / "find").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"}
    with pytest.raises(OSError, match="find has no -printf"):
        digest(tmp_path, 2, env=env)
    env = {**os.environ, "PATH": str(fake)}  # no sort, sha256sum, awk either
    with pytest.raises(OSError, match="the image has no"):
        digest(tmp_path, 2, env=env)


def test_an_awk_by_its_own_name_is_enough(tmp_path: Path) -> None:
    """An image trimmed of /etc/alternatives has mawk but a dangling ``awk`` link."""
    _version(tmp_path, 2)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    os.symlink("/nonexistent/awk", bin_dir / "awk")
    tools = ("find", "sort", "sha256sum", "mktemp", "rm", "tr", "cat", "tail", "mawk", "gawk", "nawk")
    for tool in tools:
        real = shutil.which(tool)
        if real is not None and os.path.realpath(real).rsplit("/", 1)[-1] != "awk":
            os.symlink(os.path.realpath(real), bin_dir / tool)
    if not any((bin_dir / t).exists() for t in ("mawk", "gawk", "nawk")):
        pytest.skip("no awk by its own name on this machine")
    env = {**os.environ, "PATH": str(bin_dir)}
    assert digest(tmp_path, 2, env=env) == digest(tmp_path, 2)
    with pytest.raises(OSError, match="printed no digest"):
        reader_files("tfk-versions: 2\ntfk-version: 2\n")
    with pytest.raises(OSError, match="printed no digest"):
        reader_files("tfk-files: 0123 1\n")


class LocalReader:
    """Plays the reader Job: runs its container's command on a local store."""

    def __init__(self, store: Path) -> None:
        self.store, self.jobs = store, 0
        self.manifest: dict = {}

    def apply(self, manifest: dict) -> int:
        self.jobs += 1
        self.manifest = manifest
        return 201

    def log(self, job: str) -> str:
        argv = [
            a.replace("$$", "$")
            for a in self.manifest["spec"]["template"]["spec"]["containers"][0]["command"]
        ]
        argv[4] = str(self.store)
        return subprocess.run(argv, capture_output=True, text=True, timeout=60).stdout


@pytest.fixture
def k8s(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[KubernetesServing, LocalReader]:
    target = KubernetesServing(ServingSpec(model_name="linear", claim="models"))
    reader = LocalReader(tmp_path)
    monkeypatch.setattr(target, "_apply", reader.apply)
    monkeypatch.setattr(target, "_job_log", reader.log)
    monkeypatch.setattr(target, "delete_object", lambda *a: True)
    return target, reader


def test_the_gate_s_digest_comes_from_the_job_that_read_the_metrics(k8s, tmp_path: Path) -> None:
    target, reader = k8s
    d = _version(tmp_path, 2)
    (d / "assets.extra").mkdir()
    (d / "assets.extra" / "tfk_metrics.json").write_text('{"accuracy": 0.9}')
    (d / "assets.extra" / "tfk_sample_request.json").write_text('{"instances": [[1.0]]}')
    checked = target.files_as_read(2)
    assert target.version_metrics(2) == {"accuracy": 0.9} and target.sample_request(2)
    assert reader.jobs == 1  # one Job read the digest, the metrics and the sample
    assert target.version_files(2) == checked and reader.jobs == 2  # a Job of its own
    (d / "saved_model.pb").write_bytes(b"graph-X")
    now = target.version_files(2)
    assert reader.jobs == 3 and now != checked
    assert "saved_model.pb" in changed(checked, now)
    assert target.files_as_read(9) is None  # no such version: nothing to vouch for


@pytest.mark.parametrize("link", ["file", "assets.extra", "version"])
def test_a_file_linked_from_out_of_the_model_directory_is_not_read(tmp_path: Path, link: str) -> None:
    """As on the local backend, a metrics file or sample request that resolves outside the
    model's directory (a link to a credentials file, to /proc/self/environ, or a version
    directory that is a link elsewhere) is missing: its content never reaches the log.
    A link that stays inside the model's directory is read."""
    from airflow_tfk.serving.kubernetes import reader_metrics

    model, outside = tmp_path / "model", tmp_path / "outside"
    secret = '{"password": "hunter2"}'
    (outside / "assets.extra").mkdir(parents=True)
    (outside / "assets.extra" / "tfk_metrics.json").write_text(secret)
    (outside / "assets.extra" / "tfk_sample_request.json").write_text(secret)
    (outside / "saved_model.pb").write_bytes(b"g")
    if link == "version":
        model.mkdir()
        (model / "3").symlink_to(outside)
    else:
        d = _version(model, 3)
        if link == "assets.extra":
            (d / "assets.extra").symlink_to(outside / "assets.extra")
        else:
            (d / "assets.extra").mkdir()
            for name in ("tfk_metrics.json", "tfk_sample_request.json"):
                (d / "assets.extra" / name).symlink_to(outside / "assets.extra" / name)
    log = read(model, 3)
    assert "hunter2" not in log
    assert reader_metrics(log) is None and parse_reader_log(log)[2] is None

    # inside the model's directory, a link is the model's own file
    shutil.rmtree(model)
    d = _version(model, 3)
    (model / "shared.json").write_text('{"accuracy": 0.9}')
    (d / "assets.extra").mkdir()
    (d / "assets.extra" / "tfk_metrics.json").symlink_to(model / "shared.json")
    assert reader_metrics(read(model, 3)) == {"accuracy": 0.9}


@pytest.mark.parametrize("metrics", [None, "over the bound", "not json"])
def test_a_sample_request_cannot_stand_in_for_missing_metrics(tmp_path: Path, metrics: str | None) -> None:
    """The sample request is printed last and raw: a line of it that looks like the
    script's metrics line is still the sample's, not the version's metrics (missing ones
    stay missing, and the gate says so)."""
    from airflow_tfk.serving.kubernetes import reader_metrics

    _version(tmp_path, 3)
    extra = tmp_path / "3" / "assets.extra"
    extra.mkdir()
    if metrics == "over the bound":
        (extra / "tfk_metrics.json").write_text('{"accuracy": 0.1}' + " " * 200)
    elif metrics == "not json":
        (extra / "tfk_metrics.json").write_text("{")
    (extra / "tfk_sample_request.json").write_text('{"instances": [[1.0]]}\ntfk-metrics: {"accuracy": 1.0}\n')
    log = read(tmp_path, 3, max_json=100)
    assert "tfk-sample:" in log
    assert reader_metrics(log) is None


def test_the_newest_version_is_one_tf_serving_can_number(tmp_path: Path) -> None:
    """A directory of digits past int64 (TF Serving ignores it, the provider reads no
    version from it) is no version: asked for the newest, the reader reads the newest
    that is one, and lists only those."""
    for name in ("3", "7", "9223372036854775808", "99999999999999999999999"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "saved_model.pb").write_bytes(b"g")
    versions, version, _ = parse_reader_log(read(tmp_path, None))
    assert (versions, version) == ([3, 7], 7)
    top = tmp_path / "9223372036854775807"  # the largest int64 is one
    top.mkdir()
    (top / "saved_model.pb").write_bytes(b"g")
    assert parse_reader_log(read(tmp_path, None))[:2] == ([3, 7, 2**63 - 1], 2**63 - 1)
