"""The one Kubernetes access layer: connection -> sync/async raw-JSON API -> retry.

Used by every target that talks to the API server (the training backend, TF Serving,
TensorBoard), so a connection is resolved, a request is made and a transient error is
retried in one way only. Nothing here imports the Kubernetes client or the cncf provider
at import time (parse time stays light); :mod:`.connection` builds the hooks lazily.
"""
