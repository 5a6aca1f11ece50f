from airflow_tfk.runtime.model_server import main

raise SystemExit(main())
