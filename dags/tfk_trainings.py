"""DAG-as-code: one DAG per training file (``*.yaml``) in a folder of the repository.

The folder is ``$TFK_TRAININGS_DIR`` (relative paths are relative to this file's folder),
by default ``trainings/`` beside the DAGs folder. Each file declares a cluster spec and
its schedule, previous-run policy, maximum duration, retries, publish step, TensorBoard,
backend, tags, owners and trigger-form Params (docs/dag-as-code.md). A broken file is an
import error of that YAML file naming the field; the other trainings still load. Check
files before they merge with ``airflow-tfk validate trainings/``.

Parsing stays cheap: the files are read and validated and the DAGs built from the
provider's operators; no template is rendered and no cluster or TensorFlow is touched.
"""

from __future__ import annotations

from airflow_tfk.dagfactory.loader import load_into

load_into(globals(), __file__)
