"""Plans: the plan table of a DAG (``plan``), the planned ``packing`` weight rule (``planner``), the
worlds it is scored over (``hedging``) and why a plan beats the alternatives (``justification``).
The top of the core: it simulates."""
