"""DAG-as-code: training files (YAML) in a repository become Airflow DAGs.

The stages, one module each:

- :mod:`~airflow_tfk.spec.yaml_reader`: the file's YAML, read strictly (the spec files'
  reader), with a line map;
- :mod:`~airflow_tfk.dagfactory.training`: the format, validated (the cluster block by
  ``TFClusterSpec`` itself, operator blocks against the operators' signatures);
- :mod:`~airflow_tfk.dagfactory.builder`: the one function that builds the DAG;
- :mod:`~airflow_tfk.dagfactory.loader`: a folder -> DAGs plus one error per broken file;
- :mod:`~airflow_tfk.dagfactory.import_errors`: those errors, as Airflow import errors of
  the YAML files themselves;
- :mod:`~airflow_tfk.dagfactory.validate`: ``airflow-tfk validate``.

Nothing is imported here, so importing the package costs nothing at parse time.
"""
