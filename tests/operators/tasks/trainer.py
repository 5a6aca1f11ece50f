"""A stand-in training task (no TensorFlow) for operator tests.

PS serve forever, like ``server.join()``. Other tasks print progress lines in the
runtime's format for ``STEPS`` steps, ``STEP_SECONDS`` apart, then exit with ``EXIT_CODE``
(``EXIT_CODE_<index>`` overrides it for one index).
"""

import json
import os
import sys
import time

sys.path.insert(0, os.environ["REPO_DIR"])
from airflow_tfk.runtime.progress import progress_line  # noqa: E402

config = json.loads(os.environ["TF_CONFIG"])
role, index = config["task"]["type"], config["task"]["index"]
if role == "ps" or (role == "worker" and os.environ.get("TFK_MODE") == "parameter_server"):
    print(f"{role}-{index} serving", flush=True)
    while True:
        time.sleep(3600)
steps = int(os.environ.get("STEPS", "5"))
start = time.time()
for step in range(1, steps + 1):
    time.sleep(float(os.environ.get("STEP_SECONDS", "0.2")))
    print(progress_line(step, steps, 1.0 / step, start), flush=True)
code = int(os.environ.get(f"EXIT_CODE_{index}", os.environ.get("EXIT_CODE", "0")))
print(f"{role}-{index} exiting with {code}", flush=True)
sys.exit(code)
