"""The Kubernetes backend (:class:`~airflow_tfk.backends.kubernetes.backend.KubernetesBackend`)
and its parts: plan, apply, watch, reads, exports, namespaces, Kueue. It knows nothing of
the local backend. Nothing is imported here."""
