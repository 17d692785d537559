"""Stages of several kernels (geometry phases, sgemm_lab.config.phases) without a GPU: the configured
stage 22's plan covers what its kernels index, its arguments are the kernels' own parameter lists, its
tensor maps are within the accelerator's rules, and a phased entry that cannot be planned is refused in
one line naming the stage and the key."""

import copy
import re

import pytest
from conftest import ROOT

from sgemm_lab.config import load as cfgmod
from sgemm_lab.config import phases
from sgemm_lab.config.records import Shape
from sgemm_lab.errors import ConfigError, ShapeError

STAGE = "22_ozaki2_int8"
SHAPES = [(1, 1, 1), (8192, 8192, 8192), (37, 3, 70001), (3, 37, 70001), (2000, 2100, 50), (131, 67, 2053),
          (100_000, 5, 7), (8192, 12, 6144)]


def _cdiv(a, b):
    return -(-a // b)


@pytest.fixture
def spec(lab):
    return lab.kernel(STAGE)


def _kernel_params(source: str) -> dict[str, str]:
    """extern "C" entry -> its parameters as prepare letters (int i, float f, a pointer P), read from the
    kernel file."""
    out = {}
    text = re.sub(r"//[^\n]*", "", source)
    for m in re.finditer(r'extern "C" __global__ void(?: __launch_bounds__\([^)]*\))?\s+(\w+)\(([^)]*)\)', text):
        letters = []
        for p in m.group(2).split(","):
            p = p.strip()
            letters.append("P" if "*" in p else "f" if p.startswith("float") else "i")
        out[m.group(1)] = "".join(letters)
    return out


@pytest.mark.parametrize("stage", [STAGE, "23_wgmma_3xtf32_split_a"])
def test_each_phase_passes_what_its_kernel_takes(lab, stage):
    spec = lab.kernel(stage)
    declared = _kernel_params((ROOT / "kernels" / spec.source).read_text())
    assert set(declared) == {p["entry"] for p in spec.phases}
    for p in spec.phases:
        assert phases.signature(spec, p) == declared[p["entry"]], p["entry"]


@pytest.mark.parametrize("mnk", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_the_plan_covers_every_output_residue_and_word(spec, mnk):
    m, n, k = mnk
    plan = phases.plan(spec, Shape.of(mnk))
    p = spec.params
    kp, np_, pad = plan.names["KP"], plan.names["NP"], p["PADK"]
    assert kp % pad == 0 and kp >= k > kp - pad and np_ % 16 == 0 and np_ >= n > np_ - 16
    work = {b.name: b for b in plan.workspace}
    assert work["res_a"].bytes == p["NMOD"] * m * kp and work["res_b"].bytes == p["NMOD"] * n * kp
    assert work["prod"].bytes == p["NMOD"] * m * np_
    assert work["maxima"].bytes == 4 * (m + n) and work["maxima"].zero and not work["prod"].zero
    by = {ph.entry: ph.launch for ph in plan.phases}
    assert [ph.entry for ph in plan.phases][-1] == "ozaki_reconstruct"  # the products before the sum
    gemm = by["ozaki_int8_gemm"]
    assert gemm.grid[0] * p["BN"] >= n and gemm.grid[1] * p["BM"] >= m and gemm.grid[2] == p["NMOD"]
    assert gemm.threads == 128 * (p["BM"] // 64 + 1) and gemm.shared_bytes > 48 * 1024
    # the reconstruction: a thread a word of four columns (rows by a grid-stride loop)
    assert by["ozaki_reconstruct"].grid[0] * by["ozaki_reconstruct"].block[0] * 4 >= n
    # the maxima, as the kernel splits its blocks: ceil(K / 1024) for each 8 rows of A, then ceil(N / 128)
    # for each 256 rows of B
    assert by["ozaki_maxima"].grid[0] == -(-k // 1024) * -(-m // 8) + -(-n // 128) * -(-k // 256)
    # the residues: RA_X x RA_Y of A's (a thread a word of four K elements, rows by a grid-stride loop over
    # RA_Y), then B's, 64 k x 32 columns each
    rx, ry = plan.names["RA_X"], plan.names["RA_Y"]
    assert rx * 256 * 4 >= kp > (rx - 1) * 256 * 4 and 1 <= ry <= min(m, 65535)
    assert by["ozaki_residues"].grid[0] == rx * ry + -(-n // 32) * -(-kp // 64)
    assert all(launch.threads == 256 for e, launch in by.items() if e != "ozaki_int8_gemm")
    assert all(launch.grid[1] <= 65535 and launch.grid[2] <= 65535 for launch in by.values())


def test_the_residue_maps_hold_every_plane_and_keep_the_accelerator_s_rules(spec):
    from sgemm_lab.gpu.tensormap import buffer_requests

    plan = phases.plan(spec, Shape(m=1000, n=300, k=1001))
    reqs = {r.symbol: r for r in buffer_requests(spec, plan.names)}
    nmod, kp = spec.params["NMOD"], plan.names["KP"]
    assert reqs["tmap_ra"].dims == (kp, nmod * 1000) and reqs["tmap_rb"].dims == (kp, nmod * 300)
    assert all(r.row_bytes == kp and r.elem_bytes == 1 and r.box[0] == 128 for r in reqs.values())
    assert reqs["tmap_ra"].box[1] == spec.params["BM"] and reqs["tmap_rb"].box[1] == spec.params["BN"]
    assert {r.operand for r in reqs.values()} == {"res_a", "res_b"}


def test_a_phased_map_may_take_the_call_s_own_operand(raw_config):
    """A map whose buffer is A, B or C is over the matrix the caller passes (dims and pitch as written)."""
    from sgemm_lab.gpu.tensormap import buffer_requests

    raw = copy.deepcopy(raw_config)
    entry = _entry(raw)
    entry["tensor_maps"] = entry["tensor_maps"] + [
        {"symbol": "tmap_b", "buffer": "B", "dims": ["N", "K"], "row_bytes": "4 * N", "box": [32, 32], "swizzle": 128}]
    raw["kernels"] = [k for k in raw["kernels"] if k["id"] != STAGE] + [entry]
    spec = cfgmod.from_dict(raw).kernel(STAGE)
    plan = phases.plan(spec, Shape(m=1000, n=300, k=1001))
    reqs = {r.symbol: r for r in buffer_requests(spec, plan.names)}
    assert reqs["tmap_b"].operand == "B" and reqs["tmap_b"].dims == (300, 1001) and reqs["tmap_b"].row_bytes == 1200
    assert reqs["tmap_b"].elem_bytes == 4 and reqs["tmap_ra"].operand == "res_a"


def test_a_threads_parameter_is_what_a_phase_s_block_sees(raw_config):
    """A phased stage's THREADS parameter (its main kernel's block, also a -D macro) is the THREADS of its
    expressions: a block written as [THREADS] launches that many threads, not one."""
    raw = copy.deepcopy(raw_config)
    entry = _entry(raw)
    entry["params"] = {**entry["params"], "THREADS": 384}
    ph = copy.deepcopy(entry["phases"])
    ph[2]["block"] = ["THREADS"]
    entry["phases"] = ph
    raw["kernels"] = [k for k in raw["kernels"] if k["id"] != STAGE] + [entry]
    spec = cfgmod.from_dict(raw).kernel(STAGE)
    by = {p.entry: p.launch for p in phases.plan(spec, Shape(m=256, n=512, k=1024)).phases}
    assert by["ozaki_int8_gemm"].block == (384, 1, 1) and by["ozaki_maxima"].block == (256, 1, 1)


def test_the_launcher_encodes_each_map_over_the_call_s_addresses(monkeypatch):
    """PhasedLauncher.phase_calls: a workspace map over its buffer, an operand map over the pointer of this
    call, and a call with another B (same shape) writes the maps again."""
    from sgemm_lab.gpu.phased import PhasedLauncher
    from sgemm_lab.gpu.tensormap import MapRequest

    class Spec:
        tensor_maps = [{"symbol": "tmap_w", "buffer": "work", "dims": [8, 8], "row_bytes": 32, "box": [8, 8]},
                       {"symbol": "tmap_b", "buffer": "B", "dims": [8, 8], "row_bytes": 32, "box": [8, 8]}]

    encoded, copied = [], []

    class Cuda:
        @staticmethod
        def memcpy_htod_async(dst, blob, stream):
            copied.append(dst)

    def encoder(req: MapRequest, address: int) -> bytes:
        encoded.append((req.symbol, address))
        return bytes(128)

    reqs = [MapRequest(symbol="tmap_w", operand="work", dims=(8, 8), row_bytes=32, box=(8, 8), swizzle=0),
            MapRequest(symbol="tmap_b", operand="B", dims=(8, 8), row_bytes=32, box=(8, 8), swizzle=0)]
    launcher = object.__new__(PhasedLauncher)
    launcher.cuda, launcher.spec, launcher._encoder = Cuda(), Spec(), encoder
    launcher._map_vars, launcher._maps_for = {"tmap_w": 0x100, "tmap_b": 0x200}, None
    import sgemm_lab.gpu.tensormap as tm

    monkeypatch.setattr(tm, "buffer_requests", lambda spec, names: reqs)
    plan = type("Plan", (), {"names": {}, "workspace": (), "phases": ()})()
    launcher.plan, launcher.workspace = (lambda shape: plan), (lambda shape: {"work": 0x1000})
    shape = Shape(m=8, n=8, k=8)
    launcher.phase_calls(shape, 1.0, 0x2000, 0x3000, 0.0, 0x4000, None)
    assert encoded == [("tmap_w", 0x1000), ("tmap_b", 0x3000)] and copied == [0x100, 0x200]
    launcher.phase_calls(shape, 1.0, 0x2000, 0x3000, 0.0, 0x4000, None)
    assert len(encoded) == 2  # same shape and addresses: nothing written again
    launcher.phase_calls(shape, 1.0, 0x2000, 0x5000, 0.0, 0x4000, None)
    assert encoded[2:] == [("tmap_w", 0x1000), ("tmap_b", 0x5000)]


def test_a_grid_beyond_cuda_s_limits_is_a_reason_not_a_crash(spec):
    from sgemm_lab.config.geometry import unsupported_reason

    assert unsupported_reason(spec, Shape(m=64, n=64, k=64)) is None
    tall = Shape(m=9_000_000, n=1, k=1)  # the INT8 GEMM's row tiles: M / 128 of them along y, over 65535
    reason = unsupported_reason(spec, tall)
    assert reason and "ozaki_int8_gemm" in reason and "grid" in reason
    with pytest.raises(ShapeError, match=f"kernel {STAGE} cannot run"):
        phases.plan(spec, tall)


def test_a_k_the_int32_sums_cannot_hold_is_refused_not_run(spec):
    """Each INT8 product sums K terms of up to 2^14 in INT32: K = 131072 could wrap, and is a skip reason."""
    from sgemm_lab.config.geometry import unsupported_reason

    assert unsupported_reason(spec, Shape(m=16, n=16, k=131071)) is None
    assert "K <= 131071" in unsupported_reason(spec, Shape(m=16, n=16, k=131072))


def test_the_workspace_counts_in_a_point_s_device_memory(spec, lab):
    m, n, k = 1000, 300, 1001
    kp, np_, nmod = -(-k // spec.params["PADK"]) * spec.params["PADK"], 304, spec.params["NMOD"]
    assert phases.workspace_bytes(spec, Shape(m=m, n=n, k=k)) == 4 * (m + n) + nmod * (m * kp + n * kp + m * np_)
    assert phases.workspace_bytes(lab.kernel("17_wgmma_tf32"), Shape(m=m, n=n, k=k)) == 0


def test_a_stage_of_several_kernels_is_no_dispatch_base_and_one_kernel_maps_no_buffers(raw_config):
    raw = copy.deepcopy(raw_config)
    raw["kernels"].append({"id": "98_pick", "title": "t", "dispatch_from": STAGE, "candidates": [{}]})
    with pytest.raises(ConfigError, match="not an earlier CUDA stage of one kernel"):
        cfgmod.from_dict(raw)
    raw = copy.deepcopy(raw_config)
    k17 = next(k for k in raw["kernels"] if k["id"] == "17_wgmma_tf32")
    k17["tensor_maps"] = [{"symbol": "tmap_a", "buffer": "res_a", "dims": ["K", "M"], "row_bytes": "K", "box": [32, 64]}]
    with pytest.raises(ConfigError, match="tensor maps of workspace buffers are for geometry 'phases'"):
        cfgmod.from_dict(raw)


def _entry(raw, **change):
    k = copy.deepcopy(next(k for k in raw["kernels"] if k["id"] == STAGE))
    k.update(change)
    return k


def _refusal(raw, entry) -> str:
    raw["kernels"] = [k for k in raw["kernels"] if k["id"] != STAGE] + [entry]
    with pytest.raises(ConfigError) as err:
        cfgmod.from_dict(raw, source="config/config.yaml")
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("config/config.yaml: ")
    return msg


def _phase(raw, i, **change):
    ph = copy.deepcopy(_entry(raw)["phases"])
    ph[i].update(change)
    return ph


@pytest.mark.parametrize("change, needle", [
    (lambda raw: dict(entry="ozaki_nothing"), "entry ozaki_nothing (the main phase) is not among the phases"),
    (lambda raw: dict(shapes="rows16"), "geometry 'phases' handles its own shapes; set shapes: any"),
    (lambda raw: dict(phases=_phase(raw, 0, args=["M", "N", "K", "A", "B", "rowmax"])),
     "phases[0] (ozaki_maxima).args: rowmax is no parameter, size, M, N, K, alpha, beta, A, B, C or workspace buffer"),
    (lambda raw: dict(phases=_phase(raw, 2, grid=["(N + BX - 1) // BX", 1, "NMOD"])),
     "phases[2].grid[0] '(N + BX - 1) // BX' uses unknown name(s) BX"),
    (lambda raw: dict(phases=_phase(raw, 2, shared="K * 2")), "phases[2].shared 'K * 2' uses unknown name(s) K"),
    (lambda raw: dict(phases=_phase(raw, 1, block=[2048])), "phase ozaki_residues's block (2048, 1, 1) is outside CUDA's limits"),
    (lambda raw: dict(phases=_phase(raw, 0, block=[32, 8, 128])), "phase ozaki_maxima's block (32, 8, 128) is outside"),
    (lambda raw: dict(params={"NMOD": 8, "BM": 128, "BN": 256, "STAGES": 4, "INFLIGHT": 1, "A": 1}),
     "A names an operand"),
    (lambda raw: dict(sweep={"BM": [64, 128]}), "a stage of several kernels has no tile sweep"),
    (lambda raw: dict(workspace=_entry(raw)["workspace"] + [{"name": "spare", "bytes": "1 - 2 * M"}]),
     "workspace spare of a negative size"),
    (lambda raw: dict(phases=_phase(raw, 1, entry="ozaki_maxima")), "phases launch an entry twice"),
    (lambda raw: dict(sizes={"KP": "(K + 15) // 16 * 16", "NP": "KQ + N"}), "sizes.NP 'KQ + N' uses unknown name(s) KQ"),
    (lambda raw: dict(sizes={"K": "16"}), "sizes.K shadows a parameter or M, N, K"),
    (lambda raw: dict(workspace=[{"name": "row_max", "bytes": "4 * M"}, {"name": "row_max", "bytes": 4}]),
     "workspace names row_max, row_max"),
    (lambda raw: dict(tensor_maps=[{"symbol": "tmap_ra", "buffer": "res_c", "dims": ["KP", "M"], "row_bytes": "KP",
                                    "elem_bytes": 1, "box": [128, "BM"]}]),
     "tensor_maps[0].buffer res_c is neither in the workspace (maxima, res_a, res_b, prod) nor an operand (A, B, C)"),
    (lambda raw: dict(tensor_maps=[{"symbol": "tmap_ra", "operand": "A", "box": [32, "BM"]}]),
     "a phased stage's maps are of workspace buffers"),
], ids=lambda x: x if isinstance(x, str) and len(x) < 30 else None)
def test_an_entry_that_cannot_be_planned_is_refused_in_one_line(raw_config, change, needle):
    msg = _refusal(raw_config, _entry(raw_config, **change(raw_config)))
    assert f"kernel {STAGE}: " in msg and needle in msg, msg


def test_the_schema_refuses_a_phase_without_its_launch(raw_config):
    ph = _phase(raw_config, 0)
    del ph[0]["grid"]
    msg = _refusal(raw_config, _entry(raw_config, phases=ph))
    assert "grid" in msg and "kernels[" in msg


def test_the_main_phase_s_rate_is_put_against_its_measured_roof(spec, lab):
    from sgemm_lab.report.stage_tables import ceilings_line, profiled_part

    ops = phases.main_ops(spec, Shape(m=4096, n=4096, k=4096))
    assert ops == 2 * 4096 * 4096 * 4096 * spec.params["NMOD"]  # K = KP here
    assert phases.main_ops(spec, Shape(m=10, n=10, k=17)) == 2 * 10 * 10 * spec.params["PADK"] * spec.params["NMOD"]
    assert phases.main_ops(spec.with_params(PADK=16), Shape(m=10, n=10, k=17)) == 2 * 10 * 10 * 32 * spec.params["NMOD"]
    line = profiled_part(spec, (4096, 4096, 4096), ops / 1e6, {"int8_tops": 2000.0})  # ns: 1000 TOPS
    assert line.startswith(", of its main phase `ozaki_int8_gemm` alone (one of the 4 kernels of a call at this shape): ")
    assert "1000 TOPS, 50.0% of the INT8 tensor probe's 2000" in line
    assert "no INT8 tensor roof measured" in profiled_part(spec, (4096, 4096, 4096), 1e6, {})
    assert profiled_part(lab.kernel("17_wgmma_tf32"), (4096, 4096, 4096), 1e6, {"int8_tops": 1.0}) == ""
    text = ceilings_line({"fp32_tflops": 59.4, "dram_gbps": 4260.0, "tf32_tflops": 484.0, "int8_tops": 1935.0})
    assert "INT8 tensor-core probe (wgmma m64n256k32) **1935 TOPS**" in text and "**484 TFLOP/s**" in text


def test_a_main_roof_over_unknown_names_is_refused(raw_config):
    msg = _refusal(raw_config, _entry(raw_config, main_roof={"ops": "2 * M * N * KQ", "ceiling": "int8_tops"}))
    assert "main_roof.ops '2 * M * N * KQ' uses unknown name(s) KQ" in msg


def test_each_kernel_of_the_stage_gets_its_row_in_the_report_in_launch_order(spec):
    """The profile table's other phases (``phase`` names them) are kept apart from the main kernels' rows
    that every other table reads, and the stage's paragraph lists each kernel in launch order with its share
    of their summed duration; a table without phases (written before they were profiled) gives none."""
    import pandas as pd

    from sgemm_lab.report.stage_tables import ncu_table, profile_lines, split_phases

    shape = (4096, 4096, 4096)
    entries = [ph["entry"] for ph in spec.phases]
    rows = []
    for i, e in enumerate(entries):
        for metric, value in (("duration", 1000.0 * (i + 1)), ("issue_slot_utilisation_pct", 50.0 + i)):
            rows.append(dict(kernel=spec.id, m=4096, n=4096, k=4096, status="ok", metric=metric, value=value,
                             phase="" if e == spec.entry else e))
    main, others = split_phases(pd.DataFrame(rows))
    assert "phase" not in main and set(main.metric) == {"duration", "issue_slot_utilisation_pct"} and len(main) == 2
    assert sorted(others.phase.unique()) == sorted(e for e in entries if e != spec.entry)
    lines = profile_lines(spec, ncu_table(main, shape), shape, None, others)
    table = [ln for ln in "\n".join(lines).splitlines() if ln.startswith("| `")]
    assert [ln.split("`")[1] for ln in table] == entries
    total = sum(1000.0 * (i + 1) for i in range(len(entries)))
    main_row = next(ln for ln in table if "(main)" in ln)
    assert f"{100 * 1000.0 * (entries.index(spec.entry) + 1) / total:.0f}%" in main_row
    assert lines[0].startswith("Nsight Compute at 4096³, of its main phase `ozaki_int8_gemm` alone")
    # as written to CSV and read back, the main kernel's empty phase is NaN: still the main kernel's rows
    back = split_phases(pd.DataFrame(rows).replace({"phase": {"": float("nan")}}))
    assert back[0].equals(main) and back[1].equals(others)
    # a table written before phases were profiled: the main kernel's rows, no table of kernels
    old, none = split_phases(pd.DataFrame(rows)[lambda d: d.phase == ""].drop(columns="phase"))
    assert none.empty and len(profile_lines(spec, ncu_table(old, shape), shape, None, none)) == 1
    # a phase without its figures: no shares of a partial sum, a line saying which
    partial = profile_lines(spec, ncu_table(main, shape), shape, None, others[others.phase != entries[0]])
    assert len(partial) == 2 and f"`{entries[0]}` without a duration" in partial[1]


SPLIT = "23_wgmma_3xtf32_split_a"


def test_a_phase_with_a_when_launches_only_where_it_holds(lab):
    """Stage 23's split-K sum launches where the plan splits K (S > 1) and nowhere else; the product's grid
    takes the S slices, and its workspace of partial planes is empty where it does not split."""
    spec = lab.kernel(SPLIT)
    for mnk, split in (((4096, 4096, 4096), False), ((256, 256, 65536), True), ((128, 96, 49152), True),
                       ((1024, 1024, 1024), True), ((16384, 192, 2048), False), ((1, 4, 1), False),
                       ((128, 96, 16640), True)):  # 520 K-tiles: 128 slices of 5 would leave 24 empty
        plan = phases.plan(spec, Shape.of(mnk))
        s = plan.names["S"]
        assert (s > 1) == split, mnk
        assert phases.launched(spec, Shape.of(mnk)) == (("split_a_tf32", "sgemm_wgmma_3xtf32") +
                                                        (("split_k_sum",) if split else ())), mnk
        main = next(p for p in plan.phases if p.entry == spec.entry)
        tiles = main.launch.grid[0] * main.launch.grid[1]
        assert main.launch.grid[2] == s and (s == 1 or tiles * s <= spec.params["SPLIT_SLOTS"]), mnk
        parts = next(b for b in plan.workspace if b.name == "parts")
        assert parts.bytes == (4 * mnk[0] * mnk[1] * s if split else 0), mnk
        # every slice at least SPLIT_MIN K-tiles of work, the last one starting inside K: no plane of zeros
        k_tiles = _cdiv(mnk[2], spec.params["BK"])
        assert s == 1 or k_tiles // s >= spec.params["SPLIT_MIN"], mnk
        assert (s - 1) * _cdiv(k_tiles, s) < k_tiles, mnk


def test_a_when_is_refused_on_the_main_phase_and_over_unknown_names(raw_config):
    raw = copy.deepcopy(raw_config)
    entry = copy.deepcopy(next(k for k in raw["kernels"] if k["id"] == SPLIT))
    main = next(i for i, p in enumerate(entry["phases"]) if p["entry"] == entry["entry"])
    for i, when, needle in ((main, "S > 1", f"phases[{main}] (sgemm_wgmma_3xtf32) is the main phase, which always launches"),
                            (0, "SLICES > 1", "phases[0].when 'SLICES > 1' uses unknown name(s) SLICES")):
        ph = copy.deepcopy(entry["phases"])
        ph[i]["when"] = when
        raw["kernels"] = [k for k in raw_config["kernels"] if k["id"] != SPLIT] + [dict(entry, phases=ph)]
        with pytest.raises(ConfigError) as err:
            cfgmod.from_dict(raw, source="config/config.yaml")
        assert f"kernel {SPLIT}: " in str(err.value) and needle in str(err.value), str(err.value)


def test_a_skipped_phase_s_grid_is_not_evaluated(raw_config):
    """Where a phase does not launch its grid need not make sense (here: a division by S - 1, zero unsplit)."""
    raw = copy.deepcopy(raw_config)
    entry = copy.deepcopy(next(k for k in raw["kernels"] if k["id"] == SPLIT))
    i = next(i for i, p in enumerate(entry["phases"]) if p.get("when"))
    entry["phases"][i]["grid"] = ["M * N // (S - 1)"]
    raw["kernels"] = [k for k in raw["kernels"] if k["id"] != SPLIT] + [entry]
    spec = cfgmod.from_dict(raw).kernel(SPLIT)
    assert phases.launched(spec, Shape(m=4096, n=4096, k=4096))[-1] == "sgemm_wgmma_3xtf32"
    plan = phases.plan(spec, Shape(m=256, n=256, k=65536))
    assert plan.names["S"] > 1 and plan.phases[-1].launch.grid[0] == 256 * 256 // (plan.names["S"] - 1)


def test_a_phase_with_a_when_has_its_block_checked_and_its_shared_memory_opted_in(lab, raw_config):
    """The launcher checks every phase's block and opts each into its dynamic shared memory once, at no
    particular shape: a phase that does not launch at 1 x 1 x 1 (its `when` false there) is among them, and
    its block is held to CUDA's limits when the config is loaded."""
    spec = lab.kernel(SPLIT)
    assert "split_k_sum" not in phases.launched(spec, Shape(m=1, n=4, k=1))
    got = {e: (b[0] * b[1] * b[2], sh) for e, b, sh in phases.blocks(spec)}
    assert got["split_k_sum"] == (256, 0) and got["sgemm_wgmma_3xtf32"][0] == spec.params["THREADS"]
    assert got["sgemm_wgmma_3xtf32"][1] > 48 * 1024
    raw = copy.deepcopy(raw_config)
    entry = copy.deepcopy(next(k for k in raw["kernels"] if k["id"] == SPLIT))
    i = next(i for i, p in enumerate(entry["phases"]) if p.get("when"))
    entry["phases"][i]["block"] = [2048]
    raw["kernels"] = [k for k in raw["kernels"] if k["id"] != SPLIT] + [entry]
    with pytest.raises(ConfigError, match=r"phase split_k_sum's block \(2048, 1, 1\) is outside CUDA's limits"):
        cfgmod.from_dict(raw)


def test_the_launcher_asks_every_phase_whether_it_can_launch(lab):
    """PhasedLauncher.launch_problem: a kernel that launches only at some shapes (split_k_sum) is asked too,
    and its problem is named by its entry."""
    from sgemm_lab.gpu.device import DeviceInfo
    from sgemm_lab.gpu.phased import PhasedLauncher

    spec = lab.kernel(SPLIT)

    class Func:
        def __init__(self, most):
            self.max_threads_per_block, self.num_regs, self.shared_size_bytes = most, 64, 0

    dev = DeviceInfo(name="H200", arch="sm_90a", compute_capability="9.0", multiprocessors=132, l2_bytes=1 << 25,
                     global_mem_bytes=1 << 37, max_threads_per_block=1024, max_shared_per_block=48 * 1024,
                     max_shared_per_block_optin=227 * 1024, max_registers_per_block=65536, pci_bus_id="0")
    launcher = object.__new__(PhasedLauncher)
    launcher._blocks = phases.blocks(spec)
    launcher.funcs = {e: Func(1024) for e, _, _ in launcher._blocks}
    assert launcher.launch_problem(dev) is None
    launcher.funcs["split_k_sum"] = Func(128)
    assert launcher.launch_problem(dev).startswith("phase split_k_sum: 256 threads per block but the build allows 128")


def test_the_report_lists_the_kernels_a_call_launched_at_the_profiled_shape(lab):
    """Stage 23's profile paragraph at a shape it splits K for lists its three kernels, at one it does not two;
    a shape today's config cannot plan (a profile of an older run) lists every phase instead of failing."""
    import pandas as pd

    from sgemm_lab.report.stage_tables import _launched, ncu_table, profile_lines

    spec = lab.kernel(SPLIT)
    assert _launched(spec, (1024, 1024, 1024)) == ("split_a_tf32", "sgemm_wgmma_3xtf32", "split_k_sum")
    assert _launched(spec, (4096, 4096, 4096)) == ("split_a_tf32", "sgemm_wgmma_3xtf32")
    assert _launched(spec, (20_000_000, 4, 64)) == _launched(spec, (1024, 1024, 1024))  # grid y past 65535: all
    for shape, entries in (((1024, 1024, 1024), ["split_a_tf32", "sgemm_wgmma_3xtf32", "split_k_sum"]),
                           ((4096, 4096, 4096), ["split_a_tf32", "sgemm_wgmma_3xtf32"])):
        rows = [dict(kernel=spec.id, m=shape[0], n=shape[1], k=shape[2], status="ok", metric="duration",
                     value=100.0 * (i + 1), phase="" if e == spec.entry else e) for i, e in enumerate(entries)]
        df = pd.DataFrame(rows)
        main, others = df[df.phase == ""].drop(columns="phase"), df[df.phase != ""]
        lines = profile_lines(spec, ncu_table(main, shape), shape, None, others)
        assert f"one of the {len(entries)} kernels of a call at this shape" in lines[0]
        assert [ln.split("`")[1] for ln in "\n".join(lines).splitlines() if ln.startswith("| `")] == entries
