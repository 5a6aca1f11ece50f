"""A TF1-style script that only reads its cluster: the legacy flags (as ``tf.app.flags``
scripts do) and ``TF_CONFIG``. Prints one JSON line: how many hosts it saw and their
SHA-256, so a test can compare them with the list the spec implies without shipping it.
No TensorFlow: what it proves is what the process was given."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys


def digest(hosts: list[str]) -> str:
    return hashlib.sha256(",".join(hosts).encode()).hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ps_hosts", default="")
    parser.add_argument("--worker_hosts", default="")
    parser.add_argument("--job_name", default="")
    parser.add_argument("--task_index", type=int, default=0)
    parser.add_argument("--exit_code", type=int, default=0)
    flags, rest = parser.parse_known_args()
    workers = flags.worker_hosts.split(",") if flags.worker_hosts else []
    ps = flags.ps_hosts.split(",") if flags.ps_hosts else []
    tf_config = os.environ.get("TF_CONFIG", "")
    cluster = json.loads(tf_config)["cluster"] if tf_config else {}
    # A subprocess of the script still starts (no environment string over the exec limit).
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(len(os.environ.get('TF_CONFIG', '')))"],
        capture_output=True,
        text=True,
        check=False,
    )
    print(
        "TF1HOSTS "
        + json.dumps(
            {
                "argv0": sys.argv[0],
                "rest": rest,
                "pid": os.getpid(),
                "workers": len(workers),
                "worker_sha": digest(workers),
                "ps": len(ps),
                "ps_sha": digest(ps),
                "job_name": flags.job_name,
                "task_index": flags.task_index,
                "tf_config_chars": len(tf_config),
                "tf_config_workers": len(cluster.get("worker", [])),
                "tf_config_worker_sha": digest(cluster.get("worker", [])),
                "child_exit": child.returncode,
                "child_tf_config_chars": child.stdout.strip(),
            }
        ),
        flush=True,
    )
    return flags.exit_code


if __name__ == "__main__":
    sys.exit(main())
