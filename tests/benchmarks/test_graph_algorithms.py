"""benchmarks/graph_algorithms.py also times ``graphlib`` (the standard library's topological sorter),
the measurement that keeps the package's own topological order and cycle search: it runs, and the two
agree on what they compute (no timing is asserted: the figures are in docs/benchmarks.md)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.usefixtures("benchmarks_on_path")


def test_graphlib_is_measured_on_the_same_graphs(capsys: pytest.CaptureFixture[str]) -> None:
    import graph_algorithms

    rows = graph_algorithms.measure_graphlib(300, repeat=1)  # asserts both orders and cycles agree
    assert [name for name, _, _ in rows] == ["topological order", "cycle check (acyclic)", "cycle found"]
    assert all(ours > 0 and theirs > 0 for _, ours, theirs in rows)
    graph_algorithms.main(["--tasks", "200", "--repeat", "1", "--sample", "5"])
    assert "| tasks | operation | ours | graphlib | graphlib / ours |" in capsys.readouterr().out


def test_both_name_the_whole_cycle() -> None:
    import graph_algorithms

    from airflow_gpu_dag.core.model.graph import CycleError, TaskGraph

    graph = TaskGraph.from_edges(
        "d", {t: 1.0 for t in "abcd"}, [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")]
    )
    with pytest.raises(CycleError) as err:
        graph.topological_order()
    assert err.value.cycle[0] == err.value.cycle[-1] and set(err.value.cycle) == {"a", "b", "c"}
    found = graph_algorithms.graphlib_cycle(graph_algorithms.predecessors(graph))
    assert found is not None and set(found) == {"a", "b", "c"} and found[0] == found[-1]
