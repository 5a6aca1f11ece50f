"""What a sweep's try finds of the tries before it, and puts right before its first trial.

The half of :class:`~airflow_tfk.sweep.runner.SweepRunner` that runs once, as the study
is opened: trials a hard kill left running, interrupted trials never queued again, trial
clusters no trial accounts for, and the budget of trials the study has left.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.run.ending import end_run
from airflow_tfk.run.handle import ClusterHandle
from airflow_tfk.sweep import study as studies
from airflow_tfk.sweep.judge import _Trial

if TYPE_CHECKING:
    from airflow_tfk.backends.base import Backend
    from airflow_tfk.core.naming import RunIdentity
    from airflow_tfk.spec.cluster import TFClusterSpec
    from airflow_tfk.sweep.config import SweepConfig


class Resuming:
    """The resuming half of :class:`~airflow_tfk.sweep.runner.SweepRunner` (its
    attributes are the runner's)."""

    backend: Backend
    spec: TFClusterSpec
    identity: RunIdentity | None
    config: SweepConfig
    base: str
    study_name: str
    storage: str
    emit: Callable[[str], None]

    def _end(self, run: _Trial, reason: str) -> None:
        raise NotImplementedError

    def _requeue(self, number: int, trial_id: int | None, params: dict[str, Any]) -> None:
        raise NotImplementedError

    def _recover(self, study: Any) -> None:
        """Put right what a previous try left (a hard kill, a lost study file), from what
        the clusters carry as well as what the study says:

        - trials left RUNNING: their clusters are ended, the trials failed and requeued;
        - interrupted trials whose parameters were never queued again (the kill came
          between the two writes): queued now;
        - live trial clusters of this sweep that no running trial accounts for (the study
          file was deleted or replaced, or a kill came between a create and its record):
          found by this task instance's labels and ended.
        """
        import optuna

        trials = study.get_trials(deepcopy=False)
        stale = [t for t in trials if t.state is optuna.trial.TrialState.RUNNING]
        self._refuse_a_study_in_use(stale)
        for frozen in stale:
            name = frozen.user_attrs.get(studies.CLUSTER)
            if name:
                ref = ClusterRef(name, self.spec.namespace_name)
                handle = ClusterHandle.for_spec(self.spec.with_name(name), self.backend, self.identity)
                if self.backend.exists(ref):
                    self._end(
                        _Trial(frozen, handle, "worker", 0), "left running by a previous try of the sweep"
                    )
            self._requeue(frozen.number, frozen._trial_id, dict(frozen.params))
        queued = {t.user_attrs.get(studies.RERUN_OF) for t in trials}
        lost = [
            t
            for t in trials
            if t.state is optuna.trial.TrialState.FAIL
            and t.user_attrs.get(studies.INTERRUPTED)
            and t.number not in queued
        ]
        for t in lost:
            study.enqueue_trial(dict(t.params), user_attrs={studies.RERUN_OF: t.number})
        unrecorded = self._end_unrecorded_clusters(trials)
        done = sum(studies.counted(t) for t in trials)
        if stale or lost:
            self.emit(
                f"resuming sweep {self.study_name}: {len(stale) + len(lost)} interrupted trials run again"
            )
        if done:
            # n_trials is the study's budget, not each try's.
            left = max(0, self.config.n_trials - done)
            self.emit(
                f"resuming sweep {self.study_name}: the study holds {done} finished trials of "
                f"n_trials={self.config.n_trials}; {left} left to run"
            )
        if unrecorded and not trials:
            self.emit(
                f"sweep {self.study_name}: the study in {self.storage} is new, but a previous try "
                f"of this task left trial clusters ({', '.join(unrecorded)}): the study file was "
                "deleted or replaced since; its trials run again"
            )

    def _refuse_a_study_in_use(self, running: list[Any]) -> None:
        """A trial running as another task instance's cluster is another sweep's, alive:
        taking it over (failing it, queueing it again) would break that sweep, and its
        cluster is not this task's to end. Two sweeps cannot share a study at once."""
        for frozen in running:
            name = frozen.user_attrs.get(studies.CLUSTER)
            owner = self.backend.owner(ClusterRef(name, self.spec.namespace_name)) if name else None
            if owner is not None and owner.identity != self.identity:
                where = studies.display_url(self.storage)
                raise studies.StudyStorageError(
                    f"sweep.study_name: study {self.study_name!r} in {where} is in use by "
                    f"another sweep: its trial {frozen.number} runs as cluster {name} of "
                    f"{owner.describe()}. Two sweeps cannot share a study at once; give each "
                    "its own sweep.study_name (or sweep.storage)"
                )

    def _end_unrecorded_clusters(self, trials: list[Any]) -> list[str]:
        """End this task instance's live trial clusters that no trial left running in the
        study accounts for (those are ended as its trials); returns their names."""
        if self.identity is None:
            return []  # without an owner's labels, nothing can be told apart as this sweep's
        recorded = {t.user_attrs.get(studies.CLUSTER) for t in trials if not t.state.is_finished()}
        pattern = re.compile(re.escape(self.base) + r"-t[0-9]+")
        found = self.backend.find(self.spec.namespace_name, self.identity.labels())
        ended = []
        for ref in found:
            if not pattern.fullmatch(ref.name) or ref.name in recorded:
                continue
            handle = ClusterHandle.for_spec(self.spec.with_name(ref.name), self.backend, self.identity)
            end_run(
                handle,
                "left by a previous try of the sweep, unknown to its study",
                emit=self.emit,
                log_lines=0,
            )
            ended.append(ref.name)
        return ended
