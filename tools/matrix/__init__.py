"""``make matrix``: the fault matrix - every lock state (and every call of the client and the
janitor) against every fault, each cell a small scenario judged by the lock's invariants.

- :mod:`tools.matrix.stack`: the workflows of every kind around the probe Lambda;
- :mod:`tools.matrix.rows`: the rows, read from the synthesized definitions;
- :mod:`tools.matrix.table`: which columns apply to which row, and each row's situation, laid
  together from :mod:`~tools.matrix.columns`, :mod:`~tools.matrix.situations`,
  :mod:`~tools.matrix.trials`, :mod:`~tools.matrix.placed` and :mod:`~tools.matrix.unreached`;
- :mod:`tools.matrix.paths`: the preparatory faults on the way to a row's state (``reach``);
- :mod:`tools.matrix.cells`: one cell - its fault and its situation's parts, run with
  :mod:`~tools.matrix.roles` (its participants), :mod:`~tools.matrix.running` (how they run),
  :mod:`~tools.matrix.gate` (``gate:``) and judged by :mod:`~tools.matrix.judge` (its invariants);
- :mod:`tools.matrix.run`: the CLI, running cells side by side on both backends.
"""
