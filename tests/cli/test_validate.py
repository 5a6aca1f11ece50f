"""`airflow-tfk render --validate`: offline checks against Kubernetes' schemas, no cluster.

Real `kubernetes-validate` schemas; the CLI runs in a subprocess as a user runs it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from airflow_tfk.render.schema_check import MIN_KUBERNETES_VERSION, bundled_versions, validate_manifests

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "docs" / "examples" / "imagenet.yaml")


def _objects() -> int:
    """How many objects the example renders (the renderer's own count, so a new object kind
    such as the NetworkPolicy does not need every message here rewritten)."""
    from airflow_tfk.cli.main import _parser, _render

    return len(_render(_parser().parse_args(["render", EXAMPLE])))


N = _objects()


def cli(*args: str, code: str | None = None) -> subprocess.CompletedProcess[str]:
    argv = (
        [sys.executable, "-c", code, *args] if code else [sys.executable, "-m", "airflow_tfk.cli.main", *args]
    )
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def test_valid_spec_prints_the_stream_and_says_what_was_checked():
    out = cli("render", "--validate", EXAMPLE)
    assert out.returncode == 0, out.stderr
    assert len(list(yaml.safe_load_all(out.stdout))) == N
    assert (
        out.stderr == f"valid: {N} of {N} objects against the Kubernetes {MIN_KUBERNETES_VERSION} schemas\n"
    )
    newest = bundled_versions()[-1]
    out = cli("render", "--validate", "--kubernetes-version", f"v{newest}.0", EXAMPLE)
    assert out.returncode == 0 and f"Kubernetes {newest} schemas" in out.stderr


def test_a_version_older_than_the_supported_one_rejects_the_job():
    out = cli("render", "--validate", "--kubernetes-version", "1.27", EXAMPLE)
    assert out.returncode == 3
    assert out.stdout == ""  # nothing to pipe into kubectl
    # both Jobs, the PS's too (the PS run as an Indexed Job with the same failure rules)
    assert "error: Job imagenet-ps: spec.podFailurePolicy" in out.stderr
    assert "error: Job imagenet-worker: spec.podFailurePolicy" in out.stderr
    assert out.stderr.rstrip().endswith(f"error: 2 of {N} objects are not valid for Kubernetes 1.27")


def test_a_broken_template_override_is_caught(tmp_path: Path):
    service = (ROOT / "templates" / "service.yaml.j2").read_text()
    (tmp_path / "service.yaml.j2").write_text(
        service.replace("  clusterIP: None", "  clusterIP: None\n  clusterIPs: 3")
    )
    out = cli("render", "--validate", "--template-dir", str(tmp_path), EXAMPLE)
    assert out.returncode == 3, out.stderr
    assert "error: Service imagenet-ps: spec.clusterIPs: 3 is not of type 'array'" in out.stderr
    assert "error: Service imagenet-worker: spec.clusterIPs" in out.stderr
    assert f"2 of {N} objects are not valid" in out.stderr


def test_bad_versions_and_misuse_are_usage_errors_naming_the_option():
    for version, says in (("latest", "'latest' is not a Kubernetes version"), ("1.24", "no bundled schemas")):
        out = cli("render", "--validate", "--kubernetes-version", version, EXAMPLE)
        assert out.returncode == 2 and out.stdout == ""
        assert out.stderr.startswith(f"error: --kubernetes-version: {says}"), out.stderr
    out = cli("render", "--kubernetes-version", "1.30", EXAMPLE)
    assert out.returncode == 2 and "--kubernetes-version goes with --validate" in out.stderr


def test_without_the_validate_extra_the_message_says_what_to_install():
    code = (
        "import sys; sys.modules['kubernetes_validate'] = None; "  # as if not installed
        "from airflow_tfk.cli.main import main; sys.exit(main(sys.argv[1:]))"
    )
    out = cli("render", "--validate", EXAMPLE, code=code)
    assert out.returncode == 2 and out.stdout == ""
    assert "pip install 'airflow-tfk[validate]'" in out.stderr


def test_objects_without_a_bundled_schema_are_noted_not_failed():
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "t"}}
    [finding] = validate_manifests([jobset], MIN_KUBERNETES_VERSION)
    assert not finding.checked and "no bundled schema" in str(finding)
