"""The scheduler side of the priority weights: what ``get_weight`` computes, fast, never raising.

:mod:`airflow_gpu_dag.priority_strategy` (the class paths DAGs name in ``weight_rule``) delegates here.
A DAG object's *basis* (task graph, critical-path remaining times, GPU work) is computed once per object
(:mod:`.basis`); the packing plan and learned durations are made off the scheduler loop and swapped in
when ready (:mod:`.background`); a task instance's weight is its cross-DAG key
(:mod:`airflow_gpu_dag.core.policy.objective`) for its run's trigger time (:mod:`.trigger`).
"""
