"""Choosing a stage's configuration: the per-shape dispatch stage and the autotuned stage.

- ``choice``: per-shape dispatch, a stated cost model (rule) or the table of shape-sweep rows, and the
  bundle of compiled candidates
- ``launch``: the launcher of a build: one module, or one per candidate chosen per shape
- ``resolve``: the concrete spec of an implementation as a step runs it (``load_spec``)
(the shape-sweep step and the build of a dispatch stage are ``pipeline.dispatch_steps``)
- ``autotune``: tile-sweep grids and the autotuner's pick of the fastest verified point
"""
