"""compute-sanitizer on every CUDA stage.

- ``sanitize``: memcheck, racecheck, synccheck and initcheck on one kernel at a small shape (through the
  profiling target)
- ``step``: the sanitize step
"""
