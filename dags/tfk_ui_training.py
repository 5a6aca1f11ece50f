"""Training triggered from the Airflow UI, with a form for its parameters.

"Trigger DAG" shows a form (workers, parameter servers, steps, image, mode, the PS grace
period, TensorBoard).
Airflow checks each field against its schema when the run is triggered; then ``validate``
builds the full ``TFClusterSpec`` and rejects bad combinations (e.g. ``all_reduce`` with
parameter servers) with an error naming the field - before anything is created.

With "Start TensorBoard" ticked, a TensorBoard over the shared logs starts alongside the
training, and the ``train`` task's "TensorBoard" button opens it. It keeps running after
the run, so the curves stay visible; ``TFStopTensorBoardOperator`` (or the backend) stops it.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import Param, task

from airflow_tfk.dag_env import BACKEND, DEFAULT_ARGS, DIGITS_APP, IMAGE, NAMESPACE, STORAGE
from airflow_tfk.dagfactory.sandbox import SandboxedDAG
from airflow_tfk.dagfactory.spec_docs import apply_form, form_params
from airflow_tfk.operators.tensorboard import TFStartTensorBoardOperator
from airflow_tfk.operators.training import TFTrainingOperator
from airflow_tfk.spec.capacity import local_max_tasks

# On the local backend every task is a process of this machine: the form offers no more
# than the backend's cap (validate checks the sum of the roles against it too).
LOCAL_CAP = local_max_tasks() if BACKEND == "local" else None
MAX_WORKERS = 600 if LOCAL_CAP is None else LOCAL_CAP
MAX_PS = 64 if LOCAL_CAP is None else LOCAL_CAP
CAP_NOTE = "" if LOCAL_CAP is None else f" The local backend runs at most {LOCAL_CAP} tasks on this machine."
SPEC_FORM = form_params(
    maximum={"worker.replicas": MAX_WORKERS, "ps.replicas": MAX_PS}, defaults={"image": IMAGE}
)
for _name in ("workers", "ps"):
    SPEC_FORM[_name][1]["description"] += CAP_NOTE

# SandboxedDAG: native rendering (ints stay ints) in a sandbox; Airflow's own native
# environment is not sandboxed, and form values are data.
with SandboxedDAG(
    dag_id="tfk_ui_training",
    default_args=DEFAULT_ARGS,  # backend, connection, deferrable: from the environment
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    tags=["airflow-tfk", "ui"],
    params={
        # The spec's fields come from their declarations (type, bounds, title, help).
        **{name: Param(**kwargs) for name, (_, kwargs) in SPEC_FORM.items()},
        "steps": Param(600, type="integer", minimum=1, maximum=10_000_000, title="Training steps"),
        "tensorboard": Param(
            False,
            type="boolean",
            title="Start TensorBoard",
            description="A TensorBoard over the training's logs; the train task links to it.",
        ),
    },
    render_template_as_native_obj=True,
    doc_md=__doc__,
):

    @task
    def validate(params: dict | None = None) -> dict:
        """The whole spec, validated; a SpecError names the offending field."""
        from airflow_tfk.spec import TFClusterSpec

        spec = {
            "name": "validation-only",  # the training task names the real cluster
            "namespace": NAMESPACE,
            "command": DIGITS_APP,
            "args": ["--tfk_steps", str(params["steps"])],
            "storage": STORAGE,
        }
        apply_form(spec, params)  # every form field at its spec path
        if not params["ps"]:
            del spec["ps"]  # 0 parameter servers: none (all_reduce)
        if params["mode"] == "parameter_server":
            spec["chief"] = {"replicas": 1}
        cluster = TFClusterSpec.from_dict(spec)
        if LOCAL_CAP is not None:
            from airflow_tfk.core.errors import LocalMachineError
            from airflow_tfk.spec.capacity import check_local_tasks

            too_big = check_local_tasks(cluster, LOCAL_CAP)
            if too_big is not None:
                raise LocalMachineError(*too_big, cluster.task_count())
        del spec["name"]
        return spec

    @task.short_circuit
    def tensorboard_wanted(params: dict | None = None) -> bool:
        return bool(params["tensorboard"])

    spec = validate()
    # After validate, so a rejected run starts nothing; skipped unless the box is ticked.
    (
        spec
        >> tensorboard_wanted()
        >> TFStartTensorBoardOperator(claim=STORAGE["logs"]["claim"], tensorboard={"namespace": NAMESPACE})
    )
    TFTrainingOperator(
        task_id="train",
        cluster_spec=spec,
        progress_interval=10,
    )
