module airflow-tfk/tests/k8s/node/pause

go 1.26.0
