"""Which sweep owns a study: claimed before the first trial, renewed while it runs,
released when it ends.

Two sweeps given one study (the same storage and ``study_name``: two runs of a DAG with a
fixed name, two DAGs by mistake) would each take the other's running trials for a dead
try's, fail them and queue them again. So a sweep owns its study: the study's user
attribute ``tfk_owner`` records the task instance (dag, task, run, map index, try), host
and process, and when the owner last renewed it. Before its first trial a sweep claims
the study:

- nobody owns it, or its owner released it (it ended): claimed;
- a try of the same task instance owns it: a later try (a retry) takes it over, an
  earlier try is refused (a zombie of the try before must not steal it back);
- another task instance owns it: refused with :class:`StudyInUse`, naming the study and
  the owner, unless the owner stopped renewing it :data:`LEASE_SECONDS` ago (killed
  without an end: a lost worker, SIGKILL), when it is taken over and the log says so.

The record is written with a compare-and-swap in the study's own database (an UPDATE that
matches the text read, or an INSERT the unique key of the attribute table guards), so of
two sweeps starting at the same moment exactly one wins, on SQLite and the other RDB
storages alike. Optuna is imported inside the functions.
"""

from __future__ import annotations

import json
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.sweep.study import StudyStorageError, display_url

#: The study's user attribute that records its owner.
OWNER = "tfk_owner"
#: An owner that has not renewed its claim for this long is gone (a kill that left no
#: end behind); another sweep may take the study over.
LEASE_SECONDS = 300.0
#: How often a running sweep renews its claim: a tenth of the lease, so a few slow or
#: failed writes of a loaded database do not lose it.
RENEW_SECONDS = 30.0
#: Characters of a name (dag, task, run, host) read from an owner record: Airflow's ids
#: are at most 250.
MAX_NAME = 512
#: How long a claim waits out a database busy with other writers.
CLAIM_WAIT_SECONDS = 60.0


class StudyInUse(StudyStorageError):
    """Another sweep owns the study."""


@dataclass(frozen=True)
class SweepOwner:
    """A sweep as its study's owner record names it."""

    dag_id: str | None
    task_id: str | None
    run_id: str | None
    map_index: int
    try_number: int | None
    host: str
    pid: int

    @classmethod
    def of(cls, identity: RunIdentity | None, try_number: object) -> SweepOwner:
        if not isinstance(try_number, int) or isinstance(try_number, bool):
            try_number = None
        if identity is None:
            return cls(None, None, None, -1, None, socket.gethostname(), os.getpid())
        return cls(
            identity.dag_id,
            identity.task_id,
            identity.run_id,
            identity.map_index,
            try_number,
            socket.gethostname(),
            os.getpid(),
        )

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> SweepOwner:
        def text(key: str) -> str | None:
            # bounded: a forged record of megabytes must not make a message of that size
            value = record.get(key)
            return None if value is None else str(value)[:MAX_NAME]

        def number(key: str, default: int | None) -> int | None:
            value = record.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) else default

        map_index, pid = number("map_index", -1), number("pid", 0)
        return cls(
            text("dag_id"),
            text("task_id"),
            text("run_id"),
            -1 if map_index is None else map_index,
            number("try_number", None),
            str(record.get("host", "?"))[:MAX_NAME],
            0 if pid is None else pid,
        )

    def same_task_instance(self, other: SweepOwner) -> bool:
        if self.dag_id is None or other.dag_id is None:  # outside Airflow: one process is one sweep
            return (self.host, self.pid) == (other.host, other.pid)
        mine = (self.dag_id, self.task_id, self.run_id, self.map_index)
        return mine == (other.dag_id, other.task_id, other.run_id, other.map_index)

    def describe(self) -> str:
        where = f"process {self.pid} on {self.host}"
        if self.dag_id is None:
            return f"a sweep outside Airflow ({where})"
        index = "" if self.map_index < 0 else f", map index {self.map_index}"
        attempt = "" if self.try_number is None else f", try {self.try_number}"
        return f"dag {self.dag_id}, task {self.task_id}, run {self.run_id}{index}{attempt} ({where})"


class StudyOwnership:
    """This sweep's claim on its study (:meth:`claim`, :meth:`start`, :meth:`end`).

    :param clock: wall-clock seconds (renewal times are compared across hosts).
    """

    def __init__(
        self,
        study: Any,
        me: SweepOwner,
        study_name: str,
        storage: str,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._study = study
        self.me = me
        self._study_name = study_name
        self._where = display_url(storage)
        self._clock = clock
        self._sleep = sleep
        self._text: str | None = None  # the record as this sweep last wrote it
        #: Who took the study from this sweep while it ran (None while it owns it).
        self.lost: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # A renewal on the thread and the release at the end each swap the record this
        # sweep last wrote: one at a time, or the release could miss a renewal's text.
        self._writing = threading.Lock()

    # -- claim, renew, release -----------------------------------------------------------
    def claim(self) -> str | None:
        """Own the study, or raise :class:`StudyInUse`. Returns what was taken over (a
        previous try, an owner gone quiet), None for a free study."""
        deadline = time.monotonic() + CLAIM_WAIT_SECONDS
        while True:
            text = self._read()
            taken = self._judge(text)
            new = self._record()
            if self._swap(text, new):
                self._text = new
                return taken
            if time.monotonic() > deadline:  # pragma: no cover - a database that never settles
                raise StudyStorageError(
                    f"sweep.storage: could not record the owner of study {self._study_name!r} in "
                    f"{self._where} within {CLAIM_WAIT_SECONDS:.0f} s: other writers hold it"
                )
            self._sleep(0.05)  # another claim wrote between the read and the swap: judge it

    def _judge(self, text: str | None) -> str | None:
        record = _record_of(text)
        if record is None or record.get("released"):
            return None
        owner = SweepOwner.from_record(record)
        if owner.same_task_instance(self.me):
            mine, theirs = self.me.try_number, owner.try_number
            if mine is not None and theirs is not None and theirs > mine:
                raise StudyInUse(
                    f"sweep.study_name: study {self._study_name!r} in {self._where} is owned by a "
                    f"later try of this task instance ({owner.describe()}); this try "
                    f"({self.me.describe()}) is stale and starts no trial"
                )
            return f"a previous try of this task instance ({owner.describe()})"
        renewed = _renewal_time(record)
        if renewed is None:
            return f"{owner.describe()}, whose claim has no renewal time to trust (it is gone)"
        quiet = self._clock() - renewed
        if quiet > LEASE_SECONDS or quiet < -LEASE_SECONDS:
            # (further ahead than a lease is no renewal a live owner wrote: a forged
            # record or a clock that far off would hold the study for ever)
            return (
                f"{owner.describe()}, which last renewed its claim {quiet:.0f} s ago "
                f"(more than {LEASE_SECONDS:.0f} s: it is gone)"
            )
        raise StudyInUse(
            f"sweep.study_name: study {self._study_name!r} in {self._where} is in use by another "
            f"sweep: {owner.describe()} owns it (claim renewed {max(quiet, 0):.0f} s ago). Two sweeps "
            "cannot share a study at once; give each its own sweep.study_name (or sweep.storage). "
            f"If that sweep is gone, its claim lapses {LEASE_SECONDS:.0f} s after its last renewal"
        )

    def renew(self) -> bool:
        """Write a new renewal time; False (and :attr:`lost` set) when the record is no
        longer this sweep's. A write the database refuses for now is tried next time."""
        with self._writing:
            if self.lost is not None or self._text is None:
                return self.lost is None
            new = self._record()
            try:
                if self._swap(self._text, new):
                    self._text = new
                    return True
                record = _record_of(self._read())
            except StudyStorageError:
                return True
        owner = "nobody" if record is None else SweepOwner.from_record(record).describe()
        self.lost = owner
        return False

    def release(self) -> None:
        """Mark the study free (the record stays, saying who had it last and when)."""
        with self._writing:
            if self._text is None or self.lost is not None:
                return
            try:
                self._swap(self._text, self._record(released=True))
            except StudyStorageError:
                pass  # the claim lapses by itself after LEASE_SECONDS
            self._text = None

    def start(self) -> None:
        """Renew the claim every :data:`RENEW_SECONDS` on a thread of its own (a slow create
        or results read on the sweep's loop must not let it lapse)."""
        self._thread = threading.Thread(target=self._renew_loop, name="sweep-owner", daemon=True)
        self._thread.start()

    def end(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        self.release()

    def _renew_loop(self) -> None:
        while not self._stop.wait(RENEW_SECONDS):
            if not self.renew():
                return

    def _record(self, *, released: bool = False) -> str:
        record: dict[str, Any] = {**asdict(self.me), "renewed_at": round(self._clock(), 3)}
        if released:
            record["released"] = True
        return json.dumps(record, sort_keys=True)

    # -- the study's database ------------------------------------------------------------
    def _read(self) -> str | None:
        rdb = _rdb(self._study)
        if rdb is None:
            value = self._study.user_attrs.get(OWNER)
            return None if value is None else json.dumps(value, sort_keys=True)
        from optuna.storages._rdb import models

        row_of = models.StudyUserAttributeModel
        return self._in_session(
            rdb,
            lambda session: (
                session.query(row_of.value_json)
                .filter(row_of.study_id == self._study._study_id, row_of.key == OWNER)
                .scalar()
            ),
        )

    def _swap(self, expected: str | None, new: str) -> bool:
        """Write ``new`` as the owner record if the stored one is still ``expected`` (None:
        no record yet); False when another writer changed it first."""
        rdb = _rdb(self._study)
        if rdb is None:  # a storage without SQL (in memory): one process, no race to lose
            if self._read() != expected:
                return False
            self._study.set_user_attr(OWNER, json.loads(new))
            return True
        import sqlalchemy.exc
        from optuna.storages._rdb import models

        row_of = models.StudyUserAttributeModel
        study_id = self._study._study_id

        def write(session: Any) -> bool:
            if expected is None:
                session.add(row_of(study_id=study_id, key=OWNER, value_json=new))
                session.flush()  # the unique (study, key) refuses a second claimant here
                return True
            changed = (
                session.query(row_of)
                .filter(row_of.study_id == study_id, row_of.key == OWNER, row_of.value_json == expected)
                .update({row_of.value_json: new}, synchronize_session=False)
            )
            return bool(changed == 1)

        try:
            return bool(self._in_session(rdb, write))
        except sqlalchemy.exc.IntegrityError:
            return False

    def _in_session(self, rdb: Any, work: Callable[[Any], Any]) -> Any:
        """Run ``work`` in one transaction of Optuna's session, committed; a database
        busy with another writer (SQLite's lock) is waited out."""
        import sqlalchemy.exc

        deadline = time.monotonic() + CLAIM_WAIT_SECONDS
        while True:
            session = rdb.scoped_session()
            try:
                result = work(session)
                session.commit()
                return result
            except sqlalchemy.exc.IntegrityError:
                session.rollback()
                raise
            except sqlalchemy.exc.OperationalError as exc:
                session.rollback()
                busy = any(w in str(exc).lower() for w in ("locked", "deadlock", "could not serialize"))
                if not busy or time.monotonic() > deadline:
                    raise StudyStorageError(
                        f"sweep.storage: cannot record the owner of study {self._study_name!r} in "
                        f"{self._where}: {str(exc).splitlines()[0]}"
                    ) from None
                self._sleep(0.05)
            except BaseException:
                session.rollback()
                raise


def _renewal_time(record: Mapping[str, Any]) -> float | None:
    """The record's renewal time, None when it is not a finite number."""
    value = record.get("renewed_at")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _record_of(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        record = json.loads(text)
    except (ValueError, RecursionError):
        return {}  # not ours to read: an owner nobody can name, judged as another sweep
    return record if isinstance(record, dict) else {}


def _rdb(study: Any) -> Any:
    """Optuna's SQL storage behind the study, or None for another kind."""
    try:
        from optuna.storages._rdb.storage import RDBStorage
    except ImportError:  # pragma: no cover - Optuna without its SQL storage
        return None
    storage = study._storage
    rdb = getattr(storage, "_backend", storage)
    return rdb if isinstance(rdb, RDBStorage) else None
