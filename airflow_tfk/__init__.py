"""airflow-tfk: distributed TensorFlow on Kubernetes, driven from Apache Airflow.

Public names are loaded lazily, so ``import airflow_tfk`` (and parsing a DAG that uses
it) pulls in neither the Kubernetes client nor TensorFlow nor the template engine.
"""

from __future__ import annotations

from airflow_tfk.core.lazy import lazy_exports

# The installed distribution's name: its metadata holds the version (pyproject.toml's).
DISTRIBUTION = "airflow-tfk"

__all__, _export = lazy_exports(
    __name__,
    {
        "airflow_tfk.spec.cluster": (
            "TFClusterSpec",
            "RoleSpec",
            "Resources",
            "StorageSpec",
            "VolumeSpec",
            "Mode",
        ),
        "airflow_tfk.core.errors": ("SpecError", "TrainingFailed"),
    },
)


def version() -> str:
    """The installed distribution's version, from its metadata: pyproject.toml is the one
    place it is written, so a wheel, an editable install and ``--version`` cannot disagree.

    :raises importlib.metadata.PackageNotFoundError: the package runs from a source tree
        that was never installed (no metadata to read).
    """
    from importlib.metadata import version as distribution_version

    return distribution_version(DISTRIBUTION)


def __getattr__(name: str) -> object:
    # ``__version__`` is read from the metadata on first use, not at import: DAG files
    # import this package, and a metadata lookup scans every distribution on sys.path.
    if name == "__version__":
        return version()
    return _export(name)
