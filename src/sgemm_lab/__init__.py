"""SGEMM optimisation lab: build, verify, time and explain hand-written CUDA SGEMM kernels.

One package per layer or pipeline feature; every name is imported from the module that defines it
(a package's ``__init__`` holds its description only):

- ``config``: the configuration (records, loading, rules, config files, expressions, launch geometry,
  memory footprint, the traffic model)
- ``gpu``: the GPU layer (device, build, launch, buffers, timing, tensor maps, GPU discovery, SASS)
- ``measure``: measuring (runners, supervised child processes, GPU locks, other work on the GPU,
  verification, statistics)
- ``dispatch``, ``epilogue``, ``profiling``, ``sanitizers``, ``failures``: one pipeline feature each,
  its library code and its step
- ``report``: the report (sections, tables, figures, run comparison) and its steps
- ``pipeline``: the entry point of every workflow script, step outcomes, result files and logs, and
  the core steps (environment, build, check and bench, tile sweep)
- ``errors``: the exceptions every layer raises

Importing the package never imports PyCUDA: only the modules that talk to a GPU do, and only inside
the functions that need it.
"""

__version__ = "0.1.0"
