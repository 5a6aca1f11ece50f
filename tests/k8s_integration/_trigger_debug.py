"""Run one ``TFClusterDoneTrigger`` in a fresh interpreter, as a triggerer would, under
asyncio's debug mode, and print what happened as one JSON line.

A fresh process because a triggerer's first trigger pays the imports its wait needs (the
cncf hooks, the async Kubernetes client): in a test process they are usually loaded
already, and the loop would look faster than a triggerer's.

argv[1]: the trigger's serialized kwargs (JSON). argv[2]: the longest a Job watch
request lasts (the real default is five minutes; a short one makes a few-second run cross
several of them). Output: ``{"event", "slow", "busy", "sessions", "requests"}``: the event's payload,
the loop's "Executing ... took" warnings, the callbacks among them that used that long
in CPU time, the async clients opened, and the API requests
by (verb, kind).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import gc
import json
import logging
import os
import resource
import sys
import threading
import time
import traceback
from typing import Any

SLOW_CALLBACK_SECONDS = 0.1


class _Slow(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("Executing") and " took " in message:
            self.messages.append(message)


def _kind(path: str) -> str:
    """``pods``, ``jobs``, ``pods/log`` ... of an API path."""
    parts = path.strip("/").split("/")
    if "namespaces" in parts and len(parts) > parts.index("namespaces") + 2:
        parts = parts[parts.index("namespaces") + 2 :]
    else:
        parts = parts[-1:]
    return "/".join(parts[:1] + parts[2:3])


def _watch_stacks(loop: asyncio.AbstractEventLoop, path: str) -> None:
    """Diagnosis: write the loop thread's stack to ``path`` while it is blocked."""
    out = open(path, "a", encoding="utf-8")  # open for the process's life
    main = threading.get_ident()
    beat = [time.monotonic()]

    def tick() -> None:
        beat[0] = time.monotonic()
        loop.call_later(0.02, tick)

    def sample() -> None:
        while True:
            time.sleep(0.05)
            if time.monotonic() - beat[0] > SLOW_CALLBACK_SECONDS:
                stack = traceback.format_stack(sys._current_frames().get(main))
                if "selectors.py" not in stack[-1]:  # not idle, only starved of CPU
                    out.write(f"{time.monotonic() - beat[0]:.3f}s\n" + "".join(stack[-25:]) + "-----\n")
                    out.flush()

    tick()
    threading.Thread(target=sample, daemon=True).start()


def _time_callbacks(busy: list[str]) -> None:
    """Note each loop callback that held the loop itself for the threshold: in CPU time of
    the loop's thread, or in wall time spent waiting by choice (a blocking call: voluntary
    context switches and no involuntary one). asyncio's warning measures wall time, which
    on a saturated machine includes the time the OS ran other processes (a timer callback
    that does nothing was seen to "take" 1 s): that is reported, not failed.

    The interpreter's own garbage collection is taken out of a callback's CPU time: a full
    collection runs inside whichever callback allocates when it is due (about 0.12 s here,
    with the Kubernetes clients' 200,000 objects; CI once failed the test's own 20 ms timer
    on it), and it is the process's, not the trigger's."""
    original = asyncio.events.Handle._run
    main = threading.get_ident()
    collected = [0.0, 0.0]  # CPU seconds in collections on the loop's thread, started at

    def collecting(phase: str, _info: dict[str, int]) -> None:
        if threading.get_ident() != main:
            return
        if phase == "start":
            collected[1] = time.thread_time()
        else:
            collected[0] += time.thread_time() - collected[1]

    gc.callbacks.append(collecting)

    def timed(self: asyncio.events.Handle) -> None:
        cpu0, wall0, gc0 = time.thread_time(), time.monotonic(), collected[0]
        use0 = resource.getrusage(resource.RUSAGE_THREAD)
        try:
            original(self)
        finally:
            wall = time.monotonic() - wall0
            if wall >= SLOW_CALLBACK_SECONDS:
                cpu = time.thread_time() - cpu0 - (collected[0] - gc0)
                use = resource.getrusage(resource.RUSAGE_THREAD)
                waited = use.ru_nvcsw > use0.ru_nvcsw and use.ru_nivcsw == use0.ru_nivcsw
                if cpu >= SLOW_CALLBACK_SECONDS or waited:
                    busy.append(f"{self!r} took {wall:.3f} s, {cpu:.3f} s of CPU besides collections")

    asyncio.events.Handle._run = timed  # type: ignore[method-assign]


def main() -> None:
    kwargs = json.loads(sys.argv[1])
    watch_seconds = int(sys.argv[2])
    slow = _Slow()
    logging.getLogger("asyncio").addHandler(slow)
    logging.getLogger("asyncio").setLevel(logging.WARNING)

    # Only the trigger module is imported up front, as the triggerer does.
    from airflow_tfk.triggers.cluster import TFClusterDoneTrigger

    sessions = 0
    busy: list[str] = []
    _time_callbacks(busy)
    requests: collections.Counter[str] = collections.Counter()

    async def run() -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        loop.slow_callback_duration = SLOW_CALLBACK_SECONDS
        if os.environ.get("TFK_LOOP_STACKS"):
            _watch_stacks(loop, os.environ["TFK_LOOP_STACKS"])
        trigger = TFClusterDoneTrigger(**kwargs)
        print("started", flush=True)  # the test lets the workers finish from here on
        async for event in trigger.run():
            return dict(event.payload)
        raise AssertionError("the trigger ended without an event")

    # Counted around the real code, patched in after the trigger module and before run():
    # the patch must not import what the trigger's start is meant to import itself.
    from airflow_tfk.backends.kubernetes import watch as _k8s_watch
    from airflow_tfk.kube import connection

    _k8s_watch.MAX_WATCH_SECONDS = watch_seconds
    original = connection.KubeConnection.async_api

    @contextlib.asynccontextmanager
    async def counted(self: Any) -> Any:
        nonlocal sessions
        sessions += 1
        async with original(self) as api:
            send = api._send

            async def counting_send(call: Any) -> Any:
                verb = "WATCH" if (call.query or {}).get("watch") else call.method
                requests[f"{verb} {_kind(call.path)}"] += 1
                return await send(call)

            api._send = counting_send
            yield api

    connection.KubeConnection.async_api = counted  # type: ignore[method-assign]
    event = asyncio.run(run(), debug=True)
    print(
        json.dumps(
            {"event": event, "slow": slow.messages, "busy": busy, "sessions": sessions, "requests": requests}
        )
    )


if __name__ == "__main__":
    main()
