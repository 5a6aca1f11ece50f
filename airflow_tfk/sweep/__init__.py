"""Hyperparameter sweeps of distributed trainings, with early stopping.

A sweep runs N trials of one cluster spec, each with its own hyperparameters passed to
the app as flags, at most ``max_concurrent_trials`` clusters at a time. Optuna chooses
the parameters (sampler) and stops losing trials early (pruner) from the loss in each
trial's progress lines; the study lives in an Optuna storage (an SQLite file by default)
so a retried sweep task resumes it.

- :mod:`~airflow_tfk.sweep.config`: the typed, validated ``sweep:`` settings (pure).
- :mod:`~airflow_tfk.sweep.trials`: one trial's spec from the base spec and its parameters (pure).
- :mod:`~airflow_tfk.sweep.study`: the Optuna study, sampler, pruner and table of trials.
- :mod:`~airflow_tfk.sweep.distinct`: the sampler wrapper that never proposes a point the study holds.
- :mod:`~airflow_tfk.sweep.owner`: which sweep owns the study (claimed before the first trial).
- :mod:`~airflow_tfk.sweep.resume`: what a try puts right of the tries before it.
- :mod:`~airflow_tfk.sweep.runner`: the loop that starts, watches, prunes and ends trial clusters.

No Airflow import anywhere here; Optuna is imported only when a sweep runs, never when a
DAG file is parsed.
"""
