"""The local backend (:class:`~airflow_tfk.backends.local.backend.LocalBackend`): the same
spec as processes on this machine, with the same TF_CONFIG and status model. It knows
nothing of the Kubernetes backend. Nothing is imported here."""
