"""A stand-in training task (no TensorFlow) for operator tests.

PS serve forever, like ``server.join()``. Other tasks print progress lines in the
runtime's format for ``STEPS`` steps, ``STEP_SECONDS`` apart, then exit with ``EXIT_CODE``
(``EXIT_CODE_<index>`` overrides it for one index). With ``EXPORT_VERSION`` set, the
exporting task (the chief, else worker 0) first prints the runtime's ``metrics`` and
``export`` event lines, as a TrainingApp does after training.
"""

import json
import os
import sys
import time

sys.path.insert(0, os.environ["REPO_DIR"])
from airflow_tfk.protocol.progress import event_line
from airflow_tfk.runtime.progress import progress_line

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
exporting = role == "chief" or (role == "worker" and index == 0 and "chief" not in config["cluster"])
if os.environ.get("EXPORT_VERSION") and exporting:
    print(event_line("metrics", accuracy=0.875, loss=float("inf")), flush=True)
    version = int(os.environ["EXPORT_VERSION"])
    print(event_line("export", model_name="digits", version=version, path=f"/m/digits/{version}"), flush=True)
code = int(os.environ.get(f"EXIT_CODE_{index}", os.environ.get("EXIT_CODE", "0")))
print(f"{role}-{index} exiting with {code}", flush=True)
sys.exit(code)
