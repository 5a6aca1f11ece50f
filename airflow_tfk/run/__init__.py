"""One run's life, on any backend, without Airflow: the handle one task gives the next,
the wait (progress, stall, policies), what a finished training produced, the end of a run,
the lifecycle of scheduled runs and the clean-up of orphaned clusters. Nothing is imported
here."""
