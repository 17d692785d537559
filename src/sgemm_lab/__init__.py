"""SGEMM optimisation lab: build, verify, time and explain hand-written CUDA SGEMM kernels.

Importing the package never imports PyCUDA: only the modules that talk to a GPU
(``gpu``, ``cublas``, ``runner``) do, and only inside the functions that need it.
"""

__version__ = "0.1.0"
