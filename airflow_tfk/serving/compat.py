"""Is the model server new enough for the export? TensorFlow Serving loads a SavedModel
written by a newer TensorFlow only as far as it knows the graph's ops and attributes: an
older server fails the load (at best) or serves a graph it half understands. The export
records the TensorFlow that wrote it (``assets.extra/tfk_export.json``); the publish
compares it with the server's before anything is created or loaded, and refuses a server
whose TensorFlow is older by a minor version or more, naming both.

The server's version comes from the serving image's tag (``tensorflow/serving:2.21.0``,
``...:2.21.0-gpu``) on Kubernetes and from the installed TensorFlow on the local backend.
A tag that is no version (``latest``, a digest, another repository's image) cannot be
judged: the publish says so and goes on. No TensorFlow import.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

from airflow_tfk.serving.base import ServingError

#: written by the training runtime next to the SavedModel (runtime.export)
EXPORT_INFO_FILE = os.path.join("assets.extra", "tfk_export.json")
#: the repositories whose tags are TensorFlow versions (with or without a registry before)
SERVING_REPOSITORIES = ("tensorflow/serving",)

_VERSION = re.compile(r"^v?(\d{1,4})\.(\d{1,4})(?:\.(\d{1,6}))?(?:[-.+_]?[A-Za-z0-9.+-]*)?$")


class ServerTooOld(ServingError):
    """The model server's TensorFlow is older than the export's: nothing was touched."""


def version_of(text: object) -> tuple[int, int] | None:
    """``(major, minor)`` of a version text (``2.21.0``, ``2.21.0-gpu``, ``2.21.0rc1``)."""
    if not isinstance(text, str):
        return None
    m = _VERSION.match(text.strip())
    return (int(m.group(1)), int(m.group(2))) if m else None


def image_tensorflow(image: str) -> str | None:
    """The TensorFlow version a TF Serving image's tag names, or None (no tag, a digest,
    a tag that is no version, another repository's image)."""
    if "@" in image:
        return None
    repo, sep, tag = image.rpartition(":")
    if not sep or "/" in tag:  # ``registry:5000/tensorflow/serving``: a port, no tag
        return None
    if not any(repo == r or repo.endswith("/" + r) for r in SERVING_REPOSITORIES):
        return None
    return tag if version_of(tag) is not None else None


def check_server(
    model: str,
    version: int,
    exported: object,
    server: str | None,
    where: str,
    emit: Callable[[str], None],
) -> None:
    """Refuse (:class:`ServerTooOld`) a server older than the export's TensorFlow.

    :param exported: what ``tfk_export.json`` holds under ``tensorflow`` (None: unknown).
    :param server: the server's TensorFlow version (None: unknown).
    :param where: where the server's version came from, for the messages.
    """
    wrote, serves = version_of(exported), version_of(server)
    if wrote is None:
        emit(
            f"{model} version {version} does not say which TensorFlow exported it "
            f"(no {EXPORT_INFO_FILE}): the server's TensorFlow is not checked against it"
        )
        return
    if serves is None:
        emit(
            f"{model} version {version} was exported with TensorFlow {exported}; {where} does not "
            "name a TensorFlow version, so the server is not checked against it"
        )
        return
    if serves < wrote:
        raise ServerTooOld(
            f"{model} version {version} was exported with TensorFlow {exported}, and {where} "
            f"runs TensorFlow {server}, older: it may not load or run the version's graph. "
            f"Serve it with TensorFlow {wrote[0]}.{wrote[1]} or newer (the serving spec's "
            "image), or export with the server's TensorFlow; nothing was published"
        )
