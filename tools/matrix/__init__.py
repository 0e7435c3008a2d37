"""``make matrix``: the fault matrix - every lock state (and every call of the client and the
janitor) against every fault, each cell a small scenario judged by the lock's invariants.

- :mod:`tools.matrix.stack`: the workflows of every kind around the probe Lambda;
- :mod:`tools.matrix.rows`: the rows, read from the synthesized definitions;
- :mod:`tools.matrix.table`: the fault columns and how each row's cells reach their state;
- :mod:`tools.matrix.cells`: one cell - its participants, its fault, its invariants;
- :mod:`tools.matrix.run`: the CLI, running cells side by side on both backends.
"""
