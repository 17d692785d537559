"""Choosing a stage's configuration: the per-shape dispatch stage and the autotuned stage.

- ``choice``: per-shape dispatch, a stated cost model (rule) or the table of shape-sweep rows, and the
  bundle of compiled candidates
- ``launch``: the launcher of a build: one module, or one per candidate chosen per shape
- ``steps``: the shape-sweep step and the build of a dispatch stage (table + bundle)
- ``autotune``: tile-sweep grids and the autotuner's pick of the fastest verified point
"""
