"""The step bodies, one module per rule file (see ``sgemm_lab.steps`` for the map)."""
