"""A stand-in training task (no TensorFlow) for the sweep tests.

Takes ``--lr`` (its hyperparameter) and, if the sweep passes one, ``--tfk_model_version``
(else its export claims the next free version, as the platform's does); prints a
progress line per step whose loss is ``(lr - 0.3)**2 + 1/step``: the further ``lr`` is
from 0.3, the worse it does at every step, so a pruner can tell the losers early. At the
end it prints the held-out ``score`` (``-(lr - 0.3)**2``) as its metrics line and, with
``EXPORT_BASE`` set, exports ``<EXPORT_BASE>/toy/<version>/``. Steps: ``STEPS``, each
``STEP_SECONDS`` long.

``LINE_EVERY`` > 1 prints a progress line every that many steps only, at an offset of its
own in each trial (trial 0: 1, 11, 21...; trial 1: 2, 12, 22...), as a parameter_server
chief reports the steps its workers had reached: no two trials share a step. In that
mode the ps and the workers (``TFK_ROLE``) serve until deleted, as theirs do.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.environ["REPO_DIR"])
from airflow_tfk.protocol.progress import event_line, progress_line

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=0.3)
parser.add_argument("--tfk_model_version", type=int, default=None)
args, _ = parser.parse_known_args()
steps = int(os.environ.get("STEPS", "10"))
export_at = int(os.environ.get("EXPORT_AT_STEP", str(steps)))
start = time.time()
gap = (args.lr - 0.3) ** 2
line_every = int(os.environ.get("LINE_EVERY", "1"))
offset = 1 + int(os.environ.get("SWEEP_TRIAL_NUMBER", "0")) % max(1, line_every - 1)
if os.environ.get("TFK_MODE") == "parameter_server" and os.environ.get("TFK_ROLE") in ("ps", "worker"):
    while True:
        time.sleep(1)


def export() -> None:
    base = os.environ.get("TFK_MODEL_DIR")
    if not base:
        return
    import tempfile

    from airflow_tfk.runtime.export import publish_version

    model_dir = os.path.join(base, "toy")
    os.makedirs(model_dir, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".tmp-export-", dir=model_dir)
    with open(os.path.join(tmp, "model.json"), "w") as f:
        json.dump({"lr": args.lr}, f)
    version, path = publish_version(tmp, model_dir, args.tfk_model_version)
    print(event_line("export", path=path, model_name="toy", version=version), flush=True)


for step in range(1, steps + 1):
    time.sleep(float(os.environ.get("STEP_SECONDS", "0.1")))
    if step == export_at:
        export()
    if line_every <= 1 or (step - offset) % line_every == 0:
        print(progress_line(step, steps, gap + 1.0 / step, start), flush=True)
print(event_line("metrics", score=-gap, lr=args.lr), flush=True)
