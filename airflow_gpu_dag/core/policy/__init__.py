"""The decisions a running deployment makes: Airflow's admission rule (``admission``), the cross-DAG
keys and objectives (``objective``) and the watermark controller's reservation (``reservation``).
The controller and the simulator share them. Imports ``core.model`` and ``core.analysis``."""
