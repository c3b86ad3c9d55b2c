"""Defects found while reviewing this stop's audits (each test fails on the code before its fix)."""

from __future__ import annotations

import pytest

from airflow_gpu_dag.gpu.inventory import MAX_INVENTORY_GPUS, InventoryError, parse_inventory


def test_a_static_inventory_of_an_absurd_gpu_count_is_refused_not_built() -> None:
    # Before: "99999999999999999999xa100" built one device object per GPU, so the scheduler (whose
    # weights read the inventory) hung until it ran out of memory.
    with pytest.raises(InventoryError, match=f"more than {MAX_INVENTORY_GPUS} GPUs"):
        parse_inventory("99999999999999999999xa100")
    with pytest.raises(InventoryError, match="more than"):
        parse_inventory(f"{MAX_INVENTORY_GPUS}xa100,1xh100")
    assert len(parse_inventory("8xa100:80GiB,8xh100").devices) == 16
