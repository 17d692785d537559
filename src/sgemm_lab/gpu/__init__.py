"""The GPU layer, one job a module; PyCUDA is imported lazily (none of this needs it until used).

- ``device``: the CUDA driver and context (the process's CUDA state), what the GPU is, its SM clock
- ``discovery``: which GPUs this process may use, without CUDA (NVML, else nvidia-smi)
- ``nvml``: every question asked of the driver's NVML (cuda-bindings): GPUs, SM clock, processes
- ``interop``: working inside a caller's CUDA work (their stream's order, an address's device)
- ``compile``: compile flags (one function for every build path) and the offline nvcc check
- ``build``: nvcc compiles in worker processes, the build's resource record
- ``launch``: launchers for a configured kernel and for cuBLAS (the middle of the three layers: the
  CUDA kernel; a launcher that checks the shape, derives the launch from the config and launches;
  callers such as check and bench that only use launchers)
- ``tensormap``: the TMA tensor maps a launcher writes (the driver's cuTensorMapEncodeTiled)
- ``padding``: copies of A and B with rows padded to 16 bytes, for the TMA stages on odd N or K
- ``buffers``: a problem's device buffers
- ``timing``: CUDA-event timing, warm-up by time, the L2 flush
- ``host``: host (C) stages compiled into a shared library and called through ctypes; NumPy's BLAS
- ``reference``: float64 references and device-side inputs and error measures
- ``sass``: instruction counts of a build's SASS (cuobjdump)

Callers import from the defining module (``from sgemm_lab.gpu.launch import KernelLauncher``).
"""
