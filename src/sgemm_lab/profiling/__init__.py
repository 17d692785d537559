"""Profiling with Nsight Compute.

- ``ncu``: one ncu run over every GPU implementation, tidy metrics read back from ncu's CSV
- ``target``: the process ncu profiles (and compute-sanitizer checks), run as
  ``python -m sgemm_lab.profiling.target``
- ``step``: the profile step
"""
