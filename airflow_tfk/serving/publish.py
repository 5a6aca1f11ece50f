"""The publish algorithm, once for every backend.

0. the quality gate (optional): the candidate's metrics (the training's XCom, or the
   ``tfk_metrics.json`` exported next to the model) must pass the thresholds and not
   regress against the metrics recorded for the serving version; otherwise nothing
   happens at all;
1. load the candidate where no client traffic reaches it: a second model entry,
   ``<model>-tfk-candidate``, over the same base path with a ``specific`` policy of just
   that version. The model's own entry (and so its default, versioned and labelled
   endpoints) does not change;
2. wait (bounded) until every replica reports the candidate AVAILABLE; smoke ``Predict``
   it (REST or gRPC) on each with the sample request the training app exported;
3. promote: add the version to the model's own policy and wait until every replica has it
   AVAILABLE there, then point the ``stable`` label at it, keep the newest
   ``keep_versions`` and drop the candidate entry; record its metrics as the next baseline.
   A client of the ``stable`` label (the endpoint a publish returns) so never gets a
   version that some replica does not serve yet.

Any failure writes the previous config back and raises: the serving version never
changed, and no request to the model's name ever reached the candidate.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from airflow_tfk.core.deadline import SYSTEM, Clock
from airflow_tfk.core.printable import printable
from airflow_tfk.protocol.model_config import STABLE_LABEL, ModelConfig, ModelServerConfig
from airflow_tfk.serving.base import Emit, NotBlessed, PredictError, ServingError, ServingTarget
from airflow_tfk.serving.gate import QualityGate
from airflow_tfk.serving.rollout import ServerWatch, wait_available, wait_label, wait_ready

log = logging.getLogger(__name__)
CANDIDATE_SUFFIX = "-tfk-candidate"
#: how long a publish waits for replicas that have the label to pass their readiness
#: probe (a few probe periods)
READY_SECONDS = 30.0


@dataclass(frozen=True)
class PublishResult:
    model_name: str
    version: int
    previous_version: int | None
    endpoint: str
    kept_versions: tuple[int, ...]
    backend: str
    predictions: Any = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """The XCom: model name, version, endpoint, and what the policy now holds."""
        return {
            "model_name": self.model_name,
            "version": self.version,
            "previous_version": self.previous_version,
            "endpoint": self.endpoint,
            "predict_url": f"{self.endpoint}:predict",
            "kept_versions": list(self.kept_versions),
            "backend": self.backend,
        }


def serving_version(model: ModelConfig | None) -> int | None:
    """The version that serves: the ``stable`` label, else the policy's highest version."""
    if model is None:
        return None
    if model.stable is not None:
        return model.stable
    return max(model.versions) if model.versions else None


def kept_versions(model: ModelConfig, new: int, keep: int) -> tuple[int, ...]:
    """The new version, then the previous serving one, then the rest newest first."""
    order = [new]
    previous = serving_version(model)
    if previous is not None and previous != new:
        order.append(previous)
    order += [v for v in sorted(model.versions, reverse=True) if v not in order]
    return tuple(sorted(order[:keep]))


def _check_answer(answer: Any, request: dict[str, Any]) -> Any:
    if not isinstance(answer, dict):
        raise PredictError(f"the answer is not a JSON object: {answer!r:.200}")
    out = answer.get("predictions", answer.get("outputs"))
    if out in (None, [], {}):
        raise PredictError(f"the answer holds no predictions: {answer!r:.200}")
    rows = request.get("instances")
    if isinstance(rows, list) and isinstance(out, list) and len(out) != len(rows):
        raise PredictError(f"{len(rows)} instances sent, {len(out)} predictions received")
    return out


class NotApproved(ServingError):
    """The person asked refused the candidate (or did not answer in time); it was rolled
    back before any client could reach it."""


#: Asked after the candidate answered its smoke test, before promotion: True promotes.
#: It may raise :class:`AwaitApproval` to leave the candidate loaded for a later answer.
Approve = Callable[[dict[str, Any]], bool]


class AwaitApproval(BaseException):  # a signal, like Airflow's TaskDeferred
    """Raised by an ``approve`` callback whose answer comes later: publish returns at once,
    leaving the candidate loaded (where no client calls it) and the serving version as it
    was; then :func:`publish` again with the answer, or :func:`withdraw_candidate`."""

    def __init__(self, request: dict[str, Any]) -> None:
        super().__init__(request)
        self.request = request


def withdraw_candidate(target: ServingTarget, emit: Emit) -> None:
    """Remove the candidate entry a publish left for an approval; the serving entry stays."""
    config = target.read_config() or ModelServerConfig()
    name = candidate_name(target.spec.model_name)
    target.write_config(ModelServerConfig(tuple(m for m in config.models if m.name != name)))
    emit(f"withdrew {name}: the version that served before still serves")


def withdraw_version(target: ServingTarget, version: int, previous: int | None, emit: Emit) -> bool:
    """Undo a promotion that Airflow did not record as a success: when the ``stable``
    label (or the policy) holds ``version``, the label goes back to ``previous`` and the
    version leaves the policy (the model's entry leaves the config when nothing served
    before); the candidate entry goes too. True when something was undone."""
    name = target.spec.model_name
    config = target.read_config() or ModelServerConfig()
    model = config.get(name)
    clean = _without(config, candidate_name(name))
    changed = clean != config
    if model is not None and (version in model.versions or model.labels.get(STABLE_LABEL) == version):
        if previous is None:
            clean = _without(clean, name)
        else:
            labels = {**model.labels, STABLE_LABEL: previous}
            keep = tuple(v for v in model.versions if v != version) or (previous,)
            if previous not in keep:
                keep = (*keep, previous)
            clean = clean.put(model.with_versions(tuple(sorted(keep)), labels))
        changed = True
    if changed:
        target.write_config(clean)
        emit(
            f"withdrew {name} version {version}: the '{STABLE_LABEL}' label is on "
            f"{previous if previous is not None else 'no version'} again; the candidate entry is gone"
        )
    return changed


def candidate_name(model: str) -> str:
    """The model name a candidate is validated under; no client calls it."""
    return f"{model}{CANDIDATE_SUFFIX}"


def _gate(
    target: ServingTarget,
    gate: QualityGate | None,
    version: int,
    metrics: dict[str, Any] | None,
    previous: int | None,
    emit: Emit,
) -> dict[str, Any] | None:
    """The candidate's metrics; raises :class:`NotBlessed` when the gate refuses them."""
    name = target.spec.model_name
    source = "the training task"
    if metrics is None:
        metrics = target.version_metrics(version)
        source = f"{name}/{version}/assets.extra/tfk_metrics.json"
    if gate is None:
        return metrics
    if gate.evaluation is not None:  # judged once measured, on the loaded candidate
        own = metrics if isinstance(metrics, dict) else {}  # the training's data: any shape
        shown = (
            ", ".join(f"{k} {v}" for k, v in sorted(own.items(), key=lambda kv: str(kv[0]))[:10]) or "none"
        )
        emit(
            f"the training's own metrics of {name} version {version} ({source}): "
            f"{printable(shown[:500])}; shown, not judged: the gate measures its own"
        )
        return metrics
    baseline = (
        _baseline(target, previous) if previous is not None and gate.max_regression is not None else None
    )
    verdict = gate.evaluate(metrics, baseline, previous)
    if metrics is None:
        why = (
            f"no metrics for {name} version {version}: none from the training task, and no "
            f"{source} (the training app writes it when after_train returns metrics)"
        )
        raise NotBlessed(f"{name} version {version} is not blessed: {why}", (why,), gate.on_failure)
    emit(f"quality gate on {name} version {version}, metrics from {source}: {verdict.summary()}")
    if not verdict.blessed:
        raise NotBlessed(
            f"{name} version {version} is not blessed, nothing was published: "
            + "; ".join(verdict.failures)
            + (f"; version {previous} is still serving" if previous is not None else ""),
            verdict.failures,
            gate.on_failure,
        )
    return metrics


def _not_published(exc: BaseException, name: str, version: int, now: str) -> ServingError:
    """What a publish that failed after it loaded the candidate raises, once rolled back."""
    if isinstance(exc, NotBlessed):  # by its own evaluation: keeps the gate's on_failure
        return NotBlessed(f"{exc}; {now}", exc.failures, exc.on_failure)
    kind = NotApproved if isinstance(exc, NotApproved) else ServingError
    return kind(f"{name} version {version} was not published: {exc}; {now}")


def _evaluation_rows(
    target: ServingTarget, gate: QualityGate | None, emit: Emit
) -> tuple[list[list[float]], list[float]] | None:
    """The evaluation data set of ``gate.evaluation``, read from the model store and
    checked; None without one. Raises :class:`ServingError` naming the file and why."""
    if gate is None or gate.evaluation is None:
        return None
    from airflow_tfk.serving.evaluation import MAX_DATA_BYTES, EvaluationError, read_rows

    ev = gate.evaluation
    data = target.store_file(ev.data, MAX_DATA_BYTES)
    try:
        rows, labels = read_rows(ev, data)
    except EvaluationError as exc:
        raise ServingError(f"quality_gate.evaluate: {exc}") from None
    emit(f"evaluation data {ev.data}: {len(rows)} rows of {len(rows[0])} features")
    return rows, labels


def _measured(
    target: ServingTarget,
    gate: QualityGate | None,
    version: int,
    candidate: str,
    previous: int | None,
    data: tuple[list[list[float]], list[float]] | None,
    reported: dict[str, Any] | None,
    emit: Emit,
) -> dict[str, Any] | None:
    """The candidate's metrics measured on the evaluation rows, through the model server
    (and the serving version's, when a regression bound needs them); raises
    :class:`NotBlessed` when the gate refuses them. Returns the measured metrics, with
    the training's own beside them as ``reported_<name>`` (``reported`` itself when nothing
    is measured)."""
    if gate is None or gate.evaluation is None or data is None:
        return reported
    from airflow_tfk.serving.evaluation import EvaluationError, compute, differences, requests

    ev = gate.evaluation
    name = target.spec.model_name
    rows, labels = data
    reported = reported if isinstance(reported, dict) else {}  # the training's data: any shape

    # One replica, asked directly (they all loaded the candidate): before the first
    # promotion no pod is Ready, so the Service has no endpoint to send a request to.
    view = next(iter(target.replicas().values()))

    def measure(model: str, v: int) -> dict[str, float]:
        answers: list[Any] = []
        for body in requests(ev, rows):
            answer = view.predict(body, version=v, timeout=target.spec.predict_timeout_seconds, model=model)
            answers += _check_answer(answer, body)
        try:
            return compute(ev, answers, labels)
        except EvaluationError as exc:
            raise ServingError(f"quality_gate.evaluate of {model} version {v}: {exc}") from None

    def shown(m: dict[str, float]) -> str:
        return ", ".join(f"{k} {v:g}" for k, v in m.items())

    got = measure(candidate, version)
    emit(f"independent evaluation of {name} version {version} on {ev.data} ({len(rows)} rows): {shown(got)}")
    baseline = None
    if previous is not None and gate.max_regression is not None:
        baseline = measure(name, previous)
        emit(f"serving version {previous} on the same rows: {shown(baseline)}")
    for line in differences(ev, got, reported):
        emit(f"warning: {printable(line)} (max_difference {ev.max_difference:g})")
    verdict = gate.evaluate(got, baseline, previous)
    claims = {k: reported[k] for k in got if k in reported}
    said = f" (the training reported {printable(_claims(claims))})" if claims else ""
    emit(f"quality gate on {name} version {version}, measured metrics: {verdict.summary()}")
    if not verdict.blessed:
        raise NotBlessed(
            f"{name} version {version} is not blessed by its own evaluation on {ev.data}, "
            f"nothing was published: " + "; ".join(verdict.failures) + said,
            verdict.failures,
            gate.on_failure,
        )
    # flat, so an approver's table and the next publish's baseline read them as metrics
    return {**got, **{f"reported_{k}": v for k, v in reported.items()}}


def _claims(claims: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in claims.items())[:300]


def _baseline(target: ServingTarget, version: int) -> dict[str, Any] | None:
    """The serving version's metrics: recorded when it was published, else the ones its
    training exported with it (a version published before the gate existed)."""
    recorded = target.published_metrics().get(version)
    if isinstance(recorded, dict) and recorded:
        return recorded
    exported = target.version_metrics(version)
    return exported if isinstance(exported, dict) else None


def publish(
    target: ServingTarget,
    version: int | None = None,
    sample_request: dict[str, Any] | None = None,
    emit: Emit = log.info,
    poll: float = 1.0,
    clock: Clock = SYSTEM,
    *,
    gate: QualityGate | None = None,
    metrics: dict[str, Any] | None = None,
    approve: Approve | None = None,
    fence: Callable[[], None] | None = None,
) -> PublishResult:
    """Publish ``version`` (default: the newest exported) of ``target``'s model.

    :param gate: the quality gate; None publishes without one.
    :param metrics: the candidate's metrics (e.g. from the training's XCom); default: the
        metrics file the training app exported with the version.
    :param approve: asked, once the candidate answered its smoke test under its candidate
        name, with the candidate's and the serving version's metrics; False rolls back.
    :param fence: called last before the ``stable`` label moves (every replica has the
        version): raising (e.g. :class:`NotApproved`: the scheduler no longer holds the task
        as running) rolls back as any failure before promotion does.
    :raises NotBlessed: the gate refused the version; nothing was touched.
    :raises NotApproved: ``approve`` or ``fence`` refused it; rolled back, no client saw it.
    :raises ServingError: the version did not load or answer; the previous serving
        version (if any) is serving, and never stopped.
    """
    spec = target.spec
    name = spec.model_name
    if version is None:
        exported = target.exported_versions()
        if not exported:
            raise ServingError(
                f"no exported version of {name} in the model store ({target.model_base_path()})"
            )
        version = exported[-1]
    _check_server(target, version, emit)
    config = target.read_config() or ModelServerConfig()
    previous = serving_version(config.get(name))
    # Before the gate reads the metrics: a swap after this point is a change at promotion.
    files = _files(target, version, as_read=True)
    metrics = _gate(target, gate, version, metrics, previous, emit)
    rows = _evaluation_rows(target, gate, emit)  # read and checked before anything is loaded
    target.ensure(emit)
    config = target.read_config() or ModelServerConfig()
    before = config.get(name)
    previous = serving_version(before)
    base = target.model_base_path()
    current = before or ModelConfig(name, base)
    if current.base_path != base:
        current = ModelConfig(name, base, current.platform, current.versions, current.labels)
    # a candidate entry left by a publish that was killed is never the serving one
    clean = ModelServerConfig(tuple(m for m in config.models if m.name != candidate_name(name)))
    if previous == version and target.label_version(STABLE_LABEL) == version:
        state = target.version_state(version)
        if state is not None and state.state == "AVAILABLE":
            emit(f"{name} version {version} is already the serving version")
            return PublishResult(
                name, version, previous, target.endpoint(STABLE_LABEL), current.versions, target.kind
            )
    body = _sample_request(target, version, sample_request)
    emit(
        f"publishing {name} version {version} on the {target.kind} backend "
        f"(serving now: {previous if previous is not None else 'none'}); validating it as "
        f"{candidate_name(name)}, which no client calls"
    )
    cand = ModelConfig(candidate_name(name), base, current.platform, (version,))
    restore = clean if before is not None else _without(clean, name)
    server = ServerWatch(target, emit)
    try:
        target.write_config(clean.put(cand))
        wait_available(
            target, version, spec.load_timeout_seconds, emit, poll, clock, model=cand.name, server=server
        )
        predictions = _smoke(target, body, version, cand.name, emit)
        metrics = _measured(target, gate, version, cand.name, previous, rows, metrics, emit)
        _ask(approve, target, name, version, cand.name, metrics, previous, emit, files)
        # promote: the model's own entry loads the validated version on every replica,
        # then the label moves
        loading = current.with_versions((*current.versions, version))
        emit(
            f"promoting {name} version {version}: loading it under {name} on every replica; "
            f"the '{STABLE_LABEL}' label moves once all of them have it"
        )
        target.write_config(clean.put(cand).put(loading))
        replicas = wait_available(
            target, version, spec.load_timeout_seconds, emit, poll, clock, server=server
        )
        # Last, once every replica has loaded it and just before the label moves to it: the
        # files the servers read must be the ones the gate and the approval vouched for.
        _same_files_as_checked(target, version, files, emit)
        if fence is not None:
            fence()
        emit(
            f"{name} version {version} is AVAILABLE on every replica ({len(replicas)}): "
            f"moving the '{STABLE_LABEL}' label to it"
        )
    except AwaitApproval:
        raise
    except (ServingError, OSError) as exc:
        _rollback(target, restore, version, previous, emit)
        now = _what_serves(target, previous, server, emit, poll, clock)
        raise _not_published(exc, name, version, now) from exc
    except BaseException:
        _rollback(target, restore, version, previous, emit)
        raise
    keep = kept_versions(loading, version, spec.keep_versions)
    final = loading.with_versions(keep, {**loading.labels, STABLE_LABEL: version})
    target.write_config(clean.put(final))
    wait_label(target, STABLE_LABEL, version, spec.load_timeout_seconds, emit, poll, clock)
    wait_ready(target, READY_SECONDS, emit, poll, clock)
    if metrics:
        try:
            target.record_metrics(version, metrics)
        except Exception as exc:  # the version serves; say the baseline is missing
            emit(f"warning: could not record the metrics of version {version}: {exc}")
    endpoint = target.endpoint(STABLE_LABEL)
    emit(f"{name} version {version} is serving (policy keeps {list(keep)}); endpoint {endpoint}")
    return PublishResult(
        name, version, previous, target.endpoint(STABLE_LABEL), keep, target.kind, predictions
    )


def _check_server(target: ServingTarget, version: int, emit: Emit) -> None:
    """Before anything is created or loaded: a server older than the export's TensorFlow
    is refused (:mod:`~airflow_tfk.serving.compat`)."""
    from airflow_tfk.serving.compat import check_server

    info = target.export_info(version) or {}
    server, where = target.server_tensorflow()
    check_server(target.spec.model_name, version, info.get("tensorflow"), server, where, emit)


def _smoke(target: ServingTarget, body: dict[str, Any], version: int, candidate: str, emit: Emit) -> Any:
    """The smoke predict, sent to every replica: one that loaded the candidate but cannot
    answer with it (memory, a broken copy of the files) would fail its clients after
    promotion. Returns the first replica's predictions."""
    spec = target.spec
    views = target.replicas()
    first: Any = None
    for rname, view in views.items():
        try:
            answer = view.predict(
                body,
                version=version,
                timeout=spec.predict_timeout_seconds,
                model=candidate,
                protocol=spec.smoke_protocol,
            )
            predictions = _check_answer(answer, body)
        except PredictError as exc:
            if len(views) == 1:
                raise
            raise PredictError(f"{rname}: {exc}") from exc
        first = predictions if first is None else first
    where = f" on every replica ({len(views)})" if len(views) > 1 else ""
    emit(f"smoke {spec.smoke_protocol} predict of version {version} answered{where}: {str(first)[:200]}")
    return first


def _sample_request(target: ServingTarget, version: int, given: dict[str, Any] | None) -> dict[str, Any]:
    """The smoke test's body: the one given, else the one the training app exported."""
    name = target.spec.model_name
    body = given if given is not None else target.sample_request(version)
    if not isinstance(body, dict) or not body:
        exported = target.exported_versions()  # only on this error path: it may cost a Job
        if version not in exported:
            listed = ", ".join(str(v) for v in exported[-10:]) or "none"
            raise ServingError(
                f"{name} version {version} is not in the model store ({target.model_base_path()}); "
                f"exported versions: {listed}"
            )
        raise ServingError(
            f"no sample request for {name} version {version}: the training app "
            "exports assets.extra/tfk_sample_request.json when it defines "
            "sample_input(); or pass sample_request"
        )
    return body


def _files(target: ServingTarget, version: int, *, as_read: bool = False) -> str | None:
    """The digest of ``version``'s files now, or as the read of its metrics saw them
    (None: the backend cannot tell, or the version is not there)."""
    try:
        return target.files_as_read(version) if as_read else target.version_files(version)
    except OSError as exc:
        raise ServingError(
            f"cannot tell what the files of {target.spec.model_name} version {version} are "
            f"(so not whether they change before promotion): {exc}"
        ) from exc


def _same_files_as_checked(target: ServingTarget, version: int, checked: str | None, emit: Emit) -> None:
    """Raises :class:`ServingError` when ``version``'s files are not the ``checked`` ones."""
    name = target.spec.model_name
    now = _files(target, version)
    if now != checked:
        from airflow_tfk.serving.files import changed

        raise ServingError(
            f"the files of {name} version {version} changed after the quality gate checked "
            f"them ({changed(checked, now)}; replaced, rewritten or relinked in the model "
            f"store {target.model_base_path()}/{version}): not promoted; export a new version"
        )
    if now is not None:
        emit(f"the files of {name} version {version} are the ones the gate checked")


def same_files(approved: dict[str, Any]) -> Approve:
    """The ``approve`` of a publish resumed after a person approved ``approved``: yes only
    while the version's files are still the ones that were shown for approval."""

    def approve(request: dict[str, Any]) -> bool:
        if request.get("files") != approved.get("files"):
            raise NotApproved(f"the files of version {request['version']} changed after they were approved")
        return True

    return approve


def _ask(
    approve: Approve | None,
    target: ServingTarget,
    name: str,
    version: int,
    candidate: str,
    metrics: dict[str, Any] | None,
    previous: int | None,
    emit: Emit,
    files: str | None = None,
) -> None:
    if approve is None:
        return
    serving_metrics = _baseline(target, previous) if previous is not None else None
    request = {
        "model_name": name,
        "version": version,
        "candidate": candidate,
        "metrics": metrics or {},
        "serving_version": previous,
        "serving_metrics": serving_metrics or {},
        "files": files,
    }
    emit(f"{candidate} version {version} answered its smoke test; asking for approval before promotion")
    if not approve(request):
        raise NotApproved("the candidate was not approved")
    emit(f"{name} version {version} approved: promoting it")


def _what_serves(
    target: ServingTarget, previous: int | None, server: ServerWatch, emit: Emit, poll: float, clock: Clock
) -> str:
    """What serves after a rollback, as the server reports it, not as the config hopes."""
    if previous is None:
        return "no version was serving before"
    state = target.version_state(previous)
    if state is not None and state.state == "AVAILABLE":
        return f"version {previous} is still serving"
    try:
        if server.restarted_now():
            wait_available(
                target, previous, target.spec.load_timeout_seconds, emit, poll, clock, server=server
            )
            return f"version {previous} is serving again (the model server was started again)"
    except ServingError as exc:
        return f"version {previous} is NOT serving: {exc}"
    seen = f"it reports {state.state}" if state is not None else target.unreachable() or "it did not answer"
    return f"version {previous} should still be serving, but the server does not confirm it ({seen})"


def _without(config: ModelServerConfig, name: str) -> ModelServerConfig:
    return ModelServerConfig(tuple(m for m in config.models if m.name != name))


def _rollback(
    target: ServingTarget, restored: ModelServerConfig, version: int, previous: int | None, emit: Emit
) -> None:
    # Without an earlier entry the model leaves the config altogether: an entry with no
    # versions would fall back to TF Serving's default policy, i.e. the broken version.
    try:
        target.write_config(restored)
        emit(
            f"rolled the version policy of {target.spec.model_name} back "
            f"(version {version} and its candidate entry removed; serving: "
            f"{previous if previous is not None else 'none'})"
        )
    except Exception as exc:  # the original failure is what the user must see
        emit(f"could not roll back the version policy of {target.spec.model_name}: {exc}")
