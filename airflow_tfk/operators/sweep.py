"""`TFHyperparameterSweepOperator`: a hyperparameter sweep of distributed trainings, in one task.

DAG shape: ``sweep >> publish``. The sweep's XCom carries the best trial's ``export``
and ``metrics`` in the same keys as a training's, so :class:`TFPublishModelOperator`
downstream (with its ``quality_gate``) publishes the winner and nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_tfk.core.constants import NAME_PREFIX, backend_kind
from airflow_tfk.operators._context import identity_from_context
from airflow_tfk.operators._on_backend import OnBackendOperator
from airflow_tfk.spec import operator_options as args

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_tfk.spec.cluster import TFClusterSpec
    from airflow_tfk.sweep.runner import SweepRunner


class TFHyperparameterSweepOperator(OnBackendOperator):
    """Run ``n_trials`` trainings of one cluster spec with Optuna-chosen hyperparameters,
    at most ``max_concurrent_trials`` at a time, stopping losing trials early.

    :param cluster_spec: the trials' cluster (a ``TFClusterSpec``, a mapping of its fields,
        or YAML text). Trial N is named ``<name>-t<N>`` (without ``name``: from the task
        instance) and gets one ``--<flag>=<value>`` word for each parameter after its args. (templated)
    :param sweep: the :class:`~airflow_tfk.sweep.config.SweepConfig` fields: ``n_trials``,
        ``max_concurrent_trials``, ``search_space``, ``objective``, ``direction``,
        ``sampler``, ``pruner``, ``storage``, ``study_name``... (templated)
    :param backend: ``kubernetes`` (default) or ``local``.
    :param backend_config: backend options. (templated)
    :param kubernetes_conn_id: the cncf ``kubernetes`` connection.
    :return: (XCom) ``trials`` (number, params, value, state, steps, seconds, cluster,
        model_version, note per trial), ``best`` (the best completed trial with its
        ``metrics`` and ``export``), ``study_name``, ``storage``, ``peak_concurrency``,
        ``search_space_exhausted`` (the space's size when every point of it was taken
        before ``n_trials``, else None), and
        the best trial's ``export``, ``metrics``, ``model_name``, ``model_version``,
        ``model_path`` (what :class:`TFPublishModelOperator` reads). Fails when no trial
        completed.

    Limits: the task never has more than ``max_concurrent_trials`` trial clusters; on
    Kubernetes give the spec a ``queue_name`` (a Kueue LocalQueue) as well, so the
    sweeps of several teams share the cluster fairly. A kill, ``execution_timeout`` or
    error of the task deletes every running trial's cluster; a retry resumes the study
    (from ``sweep.storage``) without running finished trials again. ``n_trials`` is the
    study's budget over every try. The study belongs to one task instance at a time
    (:mod:`~airflow_tfk.sweep.owner`): another sweep on it is refused before its first
    trial; the next try of this one takes it over.
    """

    template_fields: Sequence[str] = ("cluster_spec", "sweep", "backend_config")
    ui_color = "#ef6c00"

    def __init__(
        self,
        *,
        cluster_spec: TFClusterSpec | Mapping[str, Any] | str,
        sweep: Mapping[str, Any] | str,
        name_prefix: str = NAME_PREFIX,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.backend = backend_kind(self.backend).value  # stored as its text: it serialises with the DAG
        # The arguments a training takes are checked as a training checks them, before
        # the task exists: nothing of a bad sweep is created at run time.
        args.cluster_spec_arg(cluster_spec)
        args.name_prefix_arg(name_prefix)
        self.cluster_spec = cluster_spec
        self.sweep = sweep
        self.name_prefix = name_prefix
        from airflow_tfk.core.errors import SpecError

        if isinstance(sweep, str) and not args.templated(sweep):
            from airflow_tfk.spec.yaml_reader import load_yaml_mapping

            try:
                sweep = load_yaml_mapping(sweep)
            except SpecError as exc:
                raise SpecError("sweep", exc.rule, exc.value) from None
        if not isinstance(sweep, (Mapping, str)):
            raise SpecError("sweep", "must be a mapping of the sweep's settings or YAML text", sweep)
        if isinstance(sweep, Mapping) and "{{" not in repr(sweep):
            # Bad settings fail when the DAG is parsed, not when the task runs.
            from airflow_tfk.sweep.config import SweepConfig

            SweepConfig.from_dict(sweep)
        self._runner: SweepRunner | None = None

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_tfk._airflow.platform_config import sweep_storage_policy
        from airflow_tfk.run.lifecycle import resolve_spec
        from airflow_tfk.spec.yaml_reader import load_yaml_mapping
        from airflow_tfk.sweep import study as studies
        from airflow_tfk.sweep.config import SweepConfig
        from airflow_tfk.sweep.runner import SweepRunner
        from airflow_tfk.sweep.trials import base_name, check_trials_fit

        identity = identity_from_context(context)
        sweep = load_yaml_mapping(self.sweep) if isinstance(self.sweep, str) else self.sweep
        config = SweepConfig.from_dict(sweep)
        spec = resolve_spec(self.cluster_spec, identity, self.name_prefix)
        # A spec without a name got the task instance's; the trials' base leaves room for
        # their suffix.
        base = spec.name
        if base == identity.cluster_name(self.name_prefix):
            base = base_name(identity, self.name_prefix)
        # Every trial's spec as it will start (its flags appended), before any is made.
        check_trials_fit(spec, config, base)
        backend = self.make_backend()
        study_name = config.study_name or (
            f"{identity.dag_id}.{identity.task_id}.{identity.run_id}.{identity.map_index}"
        )
        # Checked against the platform's policy before any study or directory exists.
        storage = studies.storage_url(
            config.storage, backend.kind, getattr(backend, "root", None), study_name, sweep_storage_policy()
        )
        _mask_password(storage)
        self._runner = runner = SweepRunner(
            backend,
            spec,
            identity,
            config,
            base=base,
            study_name=study_name,
            storage=storage,
            emit=self.log.info,
            try_number=getattr(context["ti"], "try_number", None),
        )
        result = runner.run()
        self.log.info(
            "sweep %s: table of trials\n%s", study_name, studies.format_table(result.trials, config.objective)
        )
        self.log.info("%s", result.usage_line())
        self._picture(runner, study_name, storage)
        self._runner = None
        if result.best is None:
            raise RuntimeError(f"sweep {study_name}: no trial completed (see the table of trials above)")
        best = result.best
        self.log.info(
            "best trial %s: %s %s with %s; model version %s",
            best["number"],
            config.objective,
            best["value"],
            best["params"],
            (best.get("export") or {}).get("version"),
        )
        return result.to_xcom()

    def _picture(self, runner: Any, study_name: str, storage: str) -> None:
        """The sweep's learning curves and parameter importance, in the log (and as an SVG
        beside an SQLite study). A picture that cannot be drawn never fails the sweep."""
        from airflow_tfk.sweep.picture import draw

        try:
            text, svg = draw(runner.study, storage, f"sweep {study_name}")
        except Exception as exc:  # the sweep's result stands without its picture
            self.log.warning("sweep %s: no picture: %s", study_name, exc)
            return
        self.log.info("sweep %s: the trials at a glance\n%s", study_name, text)
        if svg is not None:
            self.log.info("sweep %s: the same picture as SVG: %s", study_name, svg)

    def on_kill(self) -> None:
        """Mark-failed, ``dagrun_timeout`` and ``execution_timeout``: no trial is left."""
        runner = self._runner
        if runner is not None:
            ended = runner.stop("the sweep task was killed")
            self.log.warning("sweep killed: deleted trial clusters %s", ", ".join(ended) or "(none)")


def _mask_password(url: str) -> None:
    """A database URL's password is hidden from the task's log and its XCom, as Airflow
    hides a connection's: the study's URL is printed and returned."""
    from urllib.parse import unquote, urlsplit

    from airflow.sdk.log import mask_secret

    try:
        password = urlsplit(url).password
    except ValueError:
        return
    if password:
        mask_secret(password)
        mask_secret(unquote(password))
