"""The Airflow glue that only the Airflow face (operators, sensors, triggers, the DAG
factory, the CLI) uses: Airflow's exceptions and configuration across versions, templated
fields and their text checks, assets, asset events and lineage. Nothing below the face
imports it (an import-linter contract). Nothing is imported here."""
