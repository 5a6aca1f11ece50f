"""Example training programs (offline data only: scikit-learn's bundled datasets).

- ``digits_app``: a TF2 :class:`~airflow_tfk.runtime.app.TrainingApp` (any mode; made for
  ``parameter_server``), a classifier of scikit-learn's 8x8 digits; held-out accuracy
  >= 0.90 after the default 600 steps.
- ``tf1_between_graph``: a plain TF1-style between-graph script (``--ps_hosts
  --worker_hosts --job_name --task_index``, ``tf.compat.v1``, ``MonitoredTrainingSession``)
  given as a bare ``python tf1_between_graph.py`` with ``legacy_tf1_flags``; held-out accuracy
  >= 0.90 on breast_cancer.
"""
