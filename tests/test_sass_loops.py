"""tools/sass_loops.py reads a loop's schedule from a SASS listing: its global loads and how far ahead
of their first use its shared loads are issued."""

import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))

import sass_loops  # noqa: E402

# A loop of 8 instructions (0x0100-0x0170, back edge at 0x0170): a global load second, a 128-bit shared
# load read 2 instructions later (through R9, its second register), a 32-bit one read only across the
# back edge (6 instructions on), and code before and after the loop that must not count.
LISTING = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0100*/                   LDS.128 R8, [R2] ;
        /*0110*/                   LDG.E.128 R20, desc[UR4][R4.64] ;
        /*0120*/                   FFMA R30, R9, R10, R30 ;
        /*0130*/                   LDS R12, [R3] ;
        /*0140*/                   FFMA R31, R8, R11, R31 ;
        /*0150*/                   FFMA R32, R8, R8, R32 ;
        /*0160*/              @!P0 FFMA R33, R9, R9, R33 ;
        /*0170*/               @P1 BRA 0x100 ;
        /*0180*/                   FFMA R34, R12, R12, R34 ;
        /*0190*/                   EXIT ;
"""


def test_a_loop_and_its_load_distances():
    (loop,) = sass_loops.loops(LISTING, min_length=4)
    assert (loop.start, loop.length, loop.global_loads, loop.first_global_load, loop.shared_loads) == (0x100, 8, 1, 1, 2)
    # LDS.128 R8 at 0 is first read at 2 (R9); LDS R12 at 3 is not read inside the loop body before the
    # back edge and not after it either: no distance for it
    assert loop.distances == (2,)
    assert loop.near(3) == 1 and loop.near(2) == 0


def test_short_loops_are_left_out_and_main_reads_a_file(tmp_path, capsys):
    assert sass_loops.loops(LISTING, min_length=9) == []
    f = tmp_path / "k.sass"
    f.write_text(LISTING)
    assert sass_loops.main([str(f), "--min-length", "4", "--near", "3"]) == 0
    out = capsys.readouterr().out
    assert "8 instructions, 1 global loads (first at 1), 2 shared loads" in out and "read within 3: 1" in out


def test_ldgdepbar_is_no_load_and_ldsm_writes_its_registers():
    listing = """
        /*0100*/                   LDSM.16.M88.4 R8, [R2] ;
        /*0110*/                   LDGSTS.E.BYPASS.128 [R5], desc[UR4][R6.64] ;
        /*0120*/                   LDGDEPBAR ;
        /*0130*/                   HMMA.1688.F32.TF32 R20, R11, R30, R20 ;
        /*0140*/               @P1 BRA 0x100 ;
"""
    (loop,) = sass_loops.loops(listing, min_length=4)
    assert loop.global_loads == 1 and loop.distances == (3,)  # R11 is the quad's fourth register
