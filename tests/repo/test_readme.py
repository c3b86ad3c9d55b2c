"""The README's example DAG parses and plans as the README says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_example_builds_a_gpu_dag() -> None:
    from airflow_gpu_dag.airflow.dag_reader import build_task_graph
    from airflow_gpu_dag.core import analyze

    code = README.read_text().split("```python", 1)[1].split("```", 1)[0]
    namespace: dict[str, Any] = {}
    exec(compile(code, str(README), "exec"), namespace)
    (dag,) = [v for v in namespace.values() if type(v).__name__ == "DAG"]
    graph, findings = build_task_graph(dag)
    assert findings == []
    train = graph.nodes["train"]
    assert (train.pool, train.pool_slots, train.gpus) == ("gpu_a100", 4, 4)
    assert graph.nodes["preprocess"].pool == "gpu_default"
    assert analyze(graph).critical_path == ["preprocess", "train"]
    assert analyze(graph).timings["preprocess"].remaining == 20 * 60 + 90 * 60
