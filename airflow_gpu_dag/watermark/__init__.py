"""GPU watermarks: keep each GPU pool's size equal to live usable capacity, with reservation.

The controller (``airflow gpu-dag watermark``) reads capacity from a source per pool
(:mod:`~airflow_gpu_dag.watermark.sources`), the pool's task instances over the Airflow REST API
(:mod:`~airflow_gpu_dag.hooks.rest_client`), asks the pure core
(:func:`airflow_gpu_dag.core.policy.reservation.decide_pools`) what each pool's size must be, and writes it.
Only one controller is active at a time (:mod:`~airflow_gpu_dag.watermark.leader_lock`).
"""

from __future__ import annotations
