"""Errors that end a step with one readable line instead of a traceback."""


class LabError(Exception):
    """An expected failure; ``str(err)`` is a complete one-line message for the user.

    A second argument, when given, carries detail (e.g. a compiler log) for the log file.
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class ConfigError(LabError):
    """The configuration does not match the schema or names something that does not exist."""


class NoGPUError(LabError):
    """No usable CUDA device (no driver, no PyCUDA, or no GPU)."""


class ShapeError(LabError):
    """A kernel was asked to run on a shape it does not support."""


class CompileError(LabError):
    """nvcc rejected a kernel, or the build broke a resource rule (spills, limits)."""
