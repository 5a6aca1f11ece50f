"""The real training image (images/training/Dockerfile, built by images/training/build.sh)
for the tests marked ``training_image`` (no pytest dependency here; conftest wires it).

The build starts right after collection, in the background at nice 19, only when such a
test is selected: a cold build takes ~9 min, mostly downloads (Debian packages, TensorFlow
from PyPI), so it overlaps the tests that run before. It is joined before the first test
that needs it starts, outside that test's timeout (conftest's ``pytest_runtest_protocol``
wrapper runs outside pytest-timeout's). A warm build (nothing changed) answers in < 1 s from
the cache; after a change to airflow_tfk/ it rebuilds only the wheel layers (~1 min).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .node import REPO

BUILD_SCRIPT = REPO / "images" / "training" / "build.sh"
#: build.sh's exit status when the machine lacks a prerequisite (named on stderr)
MISSING = 3


class ImageBuildError(RuntimeError):
    def __init__(self, message: str, missing: bool = False) -> None:
        super().__init__(message)
        self.missing = missing


@dataclass(frozen=True)
class TrainingImage:
    archive: Path
    ref: str  # as tagged in the archive, e.g. tfk.local/airflow-tfk-training:<key>
    config_digest: str  # sha256:... (the image ID)
    build_seconds: float


def read_archive(archive: Path, build_seconds: float = 0.0) -> TrainingImage:
    """The reference and image ID of a ``docker save``-style archive (its manifest.json)."""
    with tarfile.open(archive) as t:
        member = t.extractfile("manifest.json")
        assert member is not None
        manifest = json.load(member)[0]
    config = manifest["Config"].rsplit("/", 1)[-1].removesuffix(".json")
    return TrainingImage(archive, manifest["RepoTags"][0], f"sha256:{config.split(':')[-1]}", build_seconds)


class Build:
    """One run of build.sh in its own process group (so it can be stopped as a whole)."""

    def __init__(self) -> None:
        fd, log = tempfile.mkstemp(prefix="tfk-training-image-", suffix=".log")
        os.close(fd)
        self.log = Path(log)
        self.t0 = time.monotonic()
        with open(self.log, "wb") as fh:
            self.proc = subprocess.Popen(
                ["bash", str(BUILD_SCRIPT)],
                stdout=subprocess.PIPE,
                stderr=fh,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.result: TrainingImage | ImageBuildError | None = None

    def wait(self) -> TrainingImage:
        if self.result is None:
            assert self.proc.stdout is not None
            out = self.proc.stdout.read().decode().split()
            code = self.proc.wait()
            text = self.log.read_text(errors="replace")
            self.log.unlink(missing_ok=True)
            if code != 0 or not out:
                tail = "\n".join(text.splitlines()[-40:])
                self.result = ImageBuildError(
                    f"images/training/build.sh exited {code}:\n{tail}", missing=code == MISSING
                )
            else:
                self.result = read_archive(Path(out[-1]), time.monotonic() - self.t0)
        if isinstance(self.result, ImageBuildError):
            raise self.result
        return self.result

    def stop(self) -> None:
        """SIGTERM to the whole group: the script, and `unshare`, whose namespace then dies
        (--kill-child) with every process and mount of the build."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.log.unlink(missing_ok=True)


class NodeImport:
    """``ctr images import`` of the built archive into a node's containerd, in a thread
    started as soon as the node is up (and the build is done), so the ~30 s of hashing
    and unpacking ~2 GB overlap the tier's earlier tests; :meth:`wait` joins it."""

    def __init__(self, node, build: Build | None) -> None:
        import concurrent.futures

        self.node, self.build = node, build
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="tfk-image-import")
        self._future: concurrent.futures.Future[float] | None = None
        if build is not None and build.proc.poll() is not None:
            try:
                self._start(build.wait())
            except ImageBuildError:
                pass  # reported by the test's fixture

    def _start(self, image: TrainingImage) -> None:
        def run() -> float:
            t0 = time.monotonic()
            self.node.import_image(image.archive)
            return time.monotonic() - t0

        self._future = self._pool.submit(run)

    def wait(self, image: TrainingImage) -> tuple[float, float]:
        """(seconds the import took, seconds waited for it here)."""
        t0 = time.monotonic()
        if self._future is None:
            self._start(image)
        assert self._future is not None
        took = self._future.result()
        return took, time.monotonic() - t0

    def close(self) -> None:
        """Before the node stops (an import still running then fails with containerd)."""
        self._pool.shutdown(wait=True, cancel_futures=True)
