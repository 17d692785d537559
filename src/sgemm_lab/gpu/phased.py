"""The launcher of a stage of several kernels (geometry ``phases``, ``sgemm_lab.config.phases``): the same
call as ``gpu.launch.KernelLauncher``, C = alpha * A @ B + beta * C, made of the entry's phases in order on
the caller's stream, over a workspace this launcher owns.

The workspace grows to the largest shape called and is kept (a timing loop allocates nothing); buffers
marked ``zero`` are cleared before the first phase of every call, on the stream, so that a timed call pays
for it. Tensor maps of workspace buffers (or of A, B or C) are written when the shape or an address changes."""

from __future__ import annotations

import numpy as np

from ..config import phases
from ..config.records import KernelSpec, Shape
from ..errors import CompileError
from .build import BuildRecord
from .device import DeviceInfo, driver
from .launch import block_problem, build_record


class PhasedLauncher:
    def __init__(self, spec: KernelSpec, cubin: bytes):
        cuda = self.cuda = driver()
        self.spec = spec
        self.module = cuda.module_from_buffer(cubin)
        self.funcs = {}
        for ph in spec.phases:
            try:
                f = self.module.get_function(ph["entry"])
            except cuda.LogicError:
                raise CompileError(f"kernel {spec.id}: phase entry '{ph['entry']}' not found in {spec.source}") from None
            f.prepare(phases.signature(spec, ph))
            self.funcs[ph["entry"]] = f
        self.func = self.funcs[spec.entry]  # the main phase: what the build records
        self._plans: dict[Shape, phases.PhasePlan] = {}  # plans by shape: no expression evaluated while timing
        self._buffers: dict[str, object] = {}
        self._capacity: dict[str, int] = {}
        self._maps_for = None
        self._last = None  # (arguments, their phase calls)
        self._map_vars: dict[str, int] = {}
        self._encoder = None
        if spec.tensor_maps:
            from .tensormap import MAP_BYTES, Encoder

            for m in spec.tensor_maps:
                try:
                    ptr, size = self.module.get_global(m["symbol"])
                except cuda.LogicError:
                    raise CompileError(f"kernel {spec.id}: tensor map variable '{m['symbol']}' not in {spec.source}") from None
                if size != MAP_BYTES:
                    raise CompileError(f"kernel {spec.id}: '{m['symbol']}' is {size} B, a tensor map is {MAP_BYTES} B")
                self._map_vars[m["symbol"]] = ptr
            self._encoder = Encoder()
        # every phase's block and dynamic shared memory (the parameters' alone), a phase with a `when` too
        self._blocks = phases.blocks(spec)
        for entry, _, shared in self._blocks:
            if shared > 48 * 1024:  # above 48 KiB a kernel must opt in
                self.funcs[entry].set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, shared)

    def resources(self, arch: str, compile_s: float) -> BuildRecord:
        return build_record(self.spec, self.func, arch, compile_s)

    def phase_resources(self) -> list[dict]:
        """Registers, shared and local memory of every phase's kernel, in launch order."""
        return [dict(entry=e, registers=f.num_regs, shared_static_bytes=f.shared_size_bytes,
                     local_bytes=f.local_size_bytes) for e, f in self.funcs.items()]

    def launch_problem(self, dev: DeviceInfo) -> str | None:
        """Why a phase cannot launch its block on ``dev`` (None if every one can)."""
        for entry, (x, y, z), shared in self._blocks:
            problem = block_problem(self.funcs[entry], x * y * z, shared, dev)
            if problem:
                return f"phase {entry}: {problem}"
        return None

    def check_launchable(self, dev: DeviceInfo) -> None:
        problem = self.launch_problem(dev)
        if problem:
            raise CompileError(f"kernel {self.spec.id}: {problem}")

    def plan(self, shape: Shape) -> phases.PhasePlan:
        p = self._plans.get(shape)
        if p is None:
            p = self._plans[shape] = phases.plan(self.spec, shape)
        return p

    def workspace(self, shape: Shape) -> dict[str, object]:
        """The workspace buffers for ``shape`` (allocated or grown as needed), by name. A buffer that moves
        drops the kept phase calls and tensor maps, which point at the old one; an allocation that fails
        leaves the buffer absent, so that the next call allocates it again."""
        for buf in self.plan(shape).workspace:
            need = max(16, -(-buf.bytes // 16) * 16)  # never empty; whole 16-byte words for the clears
            if self._capacity.get(buf.name, 0) < need:
                self._last = self._maps_for = None
                old = self._buffers.pop(buf.name, None)
                self._capacity.pop(buf.name, None)
                if old is not None:
                    old.free()  # cuMemFree waits for the work queued on it
                self._buffers[buf.name] = self.cuda.mem_alloc(need)
                self._capacity[buf.name] = need
        return self._buffers

    def __call__(self, shape: Shape, alpha: float, a, b, beta: float, c, stream) -> None:
        """C = alpha*A@B + beta*C: every phase in turn on ``stream`` (None: the legacy default stream)."""
        # the calls of the last arguments are kept: a timing loop repeats them, and what the host spends
        # building them would land between the timed launches of a small shape
        key = (shape, float(alpha), float(beta), int(a), int(b), int(c), 0 if stream is None else stream.handle)
        if self._last is None or self._last[0] != key:
            self._last = (key, list(self.phase_calls(shape, alpha, a, b, beta, c, stream).values()))
        for call in self._last[1]:
            call()

    def phase_calls(self, shape: Shape, alpha: float, a, b, beta: float, c, stream) -> dict:
        """Each phase as a call on ``stream``, by entry, in launch order (the first one clears the buffers
        marked zero before it): the whole call is all of them in turn; one alone times that phase."""
        plan = self.plan(shape)  # ShapeError before anything runs
        bufs = self.workspace(shape)
        pointers = {"A": a, "B": b, "C": c, **bufs}  # what a pointer argument or a tensor map names
        if self._encoder is not None:
            self._write_maps(shape, plan, pointers, stream)
        values = {**plan.names, "alpha": np.float32(alpha), "beta": np.float32(beta), **pointers}
        zero = [(bufs[buf.name], -(-buf.bytes // 4)) for buf in plan.workspace if buf.zero]

        def call(ph: phases.Phase, first: bool):
            f, args, launch = self.funcs[ph.entry], [values[n] for n in ph.args], ph.launch

            def run():
                for ptr, words in zero if first else ():
                    self.cuda.memset_d32_async(ptr, 0, words, stream)
                f.prepared_async_call(launch.grid, launch.block, stream, *args, shared_size=launch.shared_bytes)
            return run

        return {ph.entry: call(ph, i == 0) for i, ph in enumerate(plan.phases)}

    def _write_maps(self, shape: Shape, plan: phases.PhasePlan, bufs, stream) -> None:
        """The maps over ``bufs`` (the workspace's buffers and the call's A, B and C, by name), written again
        when the shape or any of their addresses changes."""
        from .tensormap import buffer_requests

        key = (shape, tuple(int(bufs[n]) for n in sorted(bufs)))
        if key == self._maps_for:
            return
        for req in buffer_requests(self.spec, plan.names):
            blob = np.frombuffer(self._encoder(req, int(bufs[req.operand])), np.uint8)
            self.cuda.memcpy_htod_async(self._map_vars[req.symbol], blob, stream)
        self._maps_for = key

    def close(self) -> None:
        for buf in self._buffers.values():
            buf.free()
        self._buffers.clear()
        self._capacity.clear()
        self._maps_for = self._last = None

