"""Exit codes a training task uses to tell the provider how it ended.

The runtime exits with them; the templates' ``podFailurePolicy`` and the local backend's
supervisor act on them. Here, so both sides agree on the numbers.
"""

from __future__ import annotations

#: transient cluster trouble (unreachable task, aborted session): retried within the
#: task's retries (EX_TEMPFAIL)
EXIT_RETRYABLE = 75
#: checkpointed on notice (SIGTERM: preemption, eviction, node drain) and stopped: the
#: task is restarted and resumes from that checkpoint, without counting against its
#: retries, like a disruption
EXIT_PREEMPTED = 76
