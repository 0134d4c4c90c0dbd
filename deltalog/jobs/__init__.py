"""Entry points a job scheduler runs (Databricks ``spark_python_task``, cron, Airflow): see ``conf/``."""
