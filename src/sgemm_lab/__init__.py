"""SGEMM optimisation lab: build, verify, time and explain hand-written CUDA SGEMM kernels.

One package per layer, in layers from the bottom up; a module imports only its own package and those
below it (``tests/test_layers.py``), and every name from the module that defines it (a package's
``__init__`` holds its description only):

- ``errors``: the exceptions every layer raises
- ``config``: the configuration (records, loading, rules, config files, expressions, launch geometry,
  memory footprint, the traffic model, shape classes)
- ``results``: result files, logs and step outcomes; what every step shares (seeds, provenance);
  float64 verification and timing statistics
- ``gpu``: the GPU layer (device, build, launch of CUDA and host stages, buffers, timing, tensor maps,
  GPU discovery, SASS)
- ``dispatch``: which candidate of a stage runs a shape, and the concrete spec of a stage
- ``measure``: measuring (runners, supervised child processes, GPU locks, other work on the GPU, ceilings)
- ``epilogue``, ``profiling``, ``failures``, then ``sanitizers``: one pipeline feature each, its library
  code and its step
- ``report``: the report (sections, tables, figures, run comparison) and its steps
- ``pipeline``: the entry point of every workflow script and the core steps (environment, build, check
  and bench, tile and shape sweeps)
- ``library``: the lab for the user's own GPU arrays (``matmul``)

Importing the package never imports PyCUDA: only the modules that talk to a GPU do, and only inside
the functions that need it.
"""

__version__ = "0.1.0"
