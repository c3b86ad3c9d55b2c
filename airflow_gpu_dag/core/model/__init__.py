"""The model: a DAG as a graph of atomic tasks, what they ask for, and the constraints on them.

The bottom of the core: nothing here imports the other groups. ``graph`` (tasks, edges, a task's pool
and slots), ``resources`` (durations, memory, GPU requests), ``pools`` (GPU pool naming), ``findings``
(what a check reports), ``windows`` (start windows), ``budget`` (caps and claims), ``ladders``
(fallback rungs), ``mapping`` (mapped tasks), ``fingerprint`` (a graph's digest).
"""
