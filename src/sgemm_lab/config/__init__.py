"""The configuration: what to run, checked before anything runs (no GPU, no CUDA import).

- ``records``: the frozen records (a stage, a shape, the settings of each step, the run), the paths
  they name and the library baselines
- ``load``: a config dict or file -> records (the schema's defaults, ``validate``, ``from_dict``, ``load``)
- ``rules``: what the schema cannot refuse, in plain words
- ``files``: strict reading of config files, and which file set which key
- ``expr``: the bounded integer expressions over tile parameters that the config writes
- ``geometry``: launch geometry and shape preconditions, derived from a stage's parameters in one place
- ``footprint``: what a point needs in host and device memory
- ``model``: the notes' traffic model of a stage
"""
