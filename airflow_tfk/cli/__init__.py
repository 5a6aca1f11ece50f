"""``airflow-tfk``: the command line (:mod:`~airflow_tfk.cli.main`), its cluster verbs,
tables and the local Airflow deployment of ``airflow-tfk up``. Nothing is imported here."""
