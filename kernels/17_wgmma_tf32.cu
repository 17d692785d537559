// Stage 17 (TF32) - Hopper: wgmma fed by the tensor memory accelerator (TMA), one producer warpgroup and
// CONSUMERS math warpgroups. Built for sm_90a (wgmma, setmaxnreg and the bulk tensor copies exist only in
// the arch-specific target). Precision class tf32, compared with cuBLAS in TF32 mode.
//
// Block tile BM x BN of C, K-tiles of BK = 32; each consumer warpgroup owns a 64-column slice of the tile
// (BN = 64 * CONSUMERS) and all BM rows.
//
// Operand roles. TF32 wgmma reads its shared-memory operands only K-major (K contiguous), and here only A
// is: B is row-major, N contiguous. So the kernel computes the transposed product C^T = B^T A^T tile by
// tile: wgmma's "A" (64 x 8 per instruction, from registers) is a slice of B^T, loaded by each thread
// from the B tile with 32-bit LDS in the register layout wgmma names; wgmma's "B" (8 x BM, K-major, from
// shared memory through a descriptor) is the A tile exactly as TMA stored it. The accumulator is then
// (C^T)'s 64 x BM slice: row r of it is a column of C, column m' is a row of C.
//
// Shared memory per ring slot (both filled by TMA with the 128-byte swizzle, the slot 1024-byte aligned):
// - A tile: BM rows of 32 floats (one 128-byte line per row); inside each group of 8 lines the 16-byte
//   chunks are permuted, chunk c of line m stored at chunk c ^ (m % 8). wgmma knows this layout
//   (descriptor mode "128B swizzle", 1024 bytes between 8-line groups); the k-th 8-wide step starts 32
//   bytes further into the line.
// - B tile: BN / 32 boxes of 32 (k) lines x 32 (n) floats, the same swizzle with k as the line. With
//   ODD_B and N off a multiple of 4, B's layout of its own instead (below).
// - TF32X3 (stage 18): A's small parts, in the A tile's layout, between the A and B tiles of the slot;
//   or, with SMALL_STAGES < STAGES, in a ring of SMALL_STAGES slots of their own after the STAGES slots.
//
// Register fragment of wgmma's A (TF32, per warp w of the warpgroup, lane = 4 g + t):
//   a0 = (row 16w + g, k t), a1 = (row 16w + g + 8, k t), a2 = (row 16w + g, k t + 4), a3 = (16w + g + 8, t + 4).
// Which column of B a fragment row stands for is ours to choose (the epilogue undoes it), and the
// choice decides the bank conflicts of the LDS: for h = 0 (a0, a2) or 1 (a1, a3) and s = 2w + h, row
// 16w + g + 8h is slice column n = 32 (s / 4) + 16 (g / 4) + 4 (s % 4) + g % 4. The 32 lanes of one load
// then read lines k = t (or t + 4) and 16-byte chunks 4 (g / 4) + s % 4: after the swizzle (chunk ^ k)
// eight different chunks, and g % 4 picks the word: 32 different banks.
//
// ODD_B (N not a multiple of 4): B's rows start off 16-byte boundaries, which no tensor map reads, but
// rows k and k + 4 are 4 N floats apart, a pitch a map takes (16 N bytes). So B is read in place through
// four maps, one per residue r = k % 4, each over the same memory seen as rows of 4 N floats ("super-rows"
// of four of B's rows, the first at B itself): map r's super-row holds B's rows 4q .. 4q + r (its extent
// stops at the end of row 4q + r, so columns past N read zeros, and its rows stop at the last super-row
// that has a row r, so rows past K do too). Row k's columns c0 .. c0 + 31 start (r N + c0) % 4 floats past
// a 16-byte boundary; the map's box starts at that boundary, moved back a further 4 floats for r >= 2 when
// N % 4 == 2, and is RB_W = 40 floats wide, unswizzled: that floats' offset, off(r), is where column c0
// lands in the box's line. A 32-column box of B is then four regions (r = 0..3) of BK / 4 lines of 40
// floats. The lanes of one fragment load read the four residues (t = k % 4) of one line, at off(t) + n:
// with off(t) a permutation of 0..3 (N odd) the slice columns n = 32 (s / 4) + 4 g + s % 4 fall in 32
// different banks; with off(t) = 0, 2, 4, 6 (N % 4 == 2), n = 32 (s / 4) + 8 (g / 2) + 2 (s % 4) + g % 2 do.
//
// Split-K (SPLIT_SLOTS > 0): when the output tiles cannot fill the GPU, the launch plan gives the grid a
// third dimension of S K-slices; block z runs K-tiles [z * ceil(T / S), ...) of the T K-tiles, and the
// partial tiles meet in a fixed tree over slice indices (SPLIT_TREE = 1, SPLIT_FANIN children a node; at
// the split below) or
// are summed in slice order, in double, by the tile's last block (SPLIT_TREE = 0); either way the result
// does not depend on which block finished first, and the epilogue is applied once, to the sum. A cluster
// whose blocks after the first would hold only columns past N shares K instead of A (see kShare).
//
// Pipeline: STAGES ring slots, two mbarriers each (three with TF32X3). full[s]: the producer's thread arms
// it with the slot's byte count and issues the TMA copies, which complete it. empty[s]: one arrival per
// consumer warp once its wgmma that read the slot are done. ready[s] (TF32X3): one arrival per splitting
// warp once the slot's A tile is split. Consumers wait on full (ready), producer on empty, each tracking
// the phase parity of its round around the ring; the splitting warps also wait on empty before reusing
// a slot of the small parts' own ring. The producer warpgroup gives most of its registers to the
// consumers (setmaxnreg), which hold BM / 2 FP32 accumulators per thread.

#include <cstdint>

#include "common.cuh"

#ifndef BM
#define BM 256
#endif
#ifndef BN
#define BN 128
#endif
#ifndef BK
#define BK 32
#endif
#ifndef STAGES
#define STAGES 4
#endif
#ifndef CLUSTER_N
#define CLUSTER_N 2  // blocks of a cluster along N: they share A's tile, each copying 1 / CLUSTER_N of it to all
#endif
#ifndef TF32X3
#define TF32X3 0  // 1: 3xTF32 (stage 18), FP32-accurate products from three TF32 wgmma per step
#endif
#ifndef GROUP_M
#define GROUP_M 8   // grouped tile order: consecutive blocks walk GROUP_M tile rows before the next column
#endif
#ifndef PRODUCER_REGS
#define PRODUCER_REGS 40
#endif
#ifndef CONSUMER_REGS
#define CONSUMER_REGS 232
#endif
#ifndef SPLIT_SLOTS
#define SPLIT_SLOTS 0  // blocks the split-K workspace holds (launch plan: tiles * slices <= this); 0: no split
#endif
#ifndef SPLIT_TREE
#define SPLIT_TREE 1   // split-K partials summed by a fixed binary tree (1) or by the tile's last block (0)
#endif
#ifndef SPLIT_FANIN
#define SPLIT_FANIN 2  // SPLIT_TREE: children a node of the tree (2, 4 or 8: one, two or three binary levels)
#endif
#ifndef KSHARE_MIN_KTILES
#define KSHARE_MIN_KTILES 32  // a cluster shares K (below) only if each of its slices keeps this many K-tiles
#endif
#ifndef SMALL_STAGES
#define SMALL_STAGES STAGES  // TF32X3: slots for A's small parts (fewer than STAGES: a ring of their own)
#endif
#ifndef TF32_PARTS
#define TF32_PARTS 0   // TF32 (TF32X3 = 0): 1 = every RN_STEPS k-steps sum from zero in a part, added into d by one FADD
#endif
#ifndef RN_STEPS
#define RN_STEPS 4     // k-steps of 8 whose products sum from zero before one rounded addition into d (TF32X3, TF32_PARTS)
#endif
#ifndef SMALL_SMALL
#define SMALL_SMALL 0  // TF32X3: 1 = a fourth product, small x small, first in each part (4xTF32)
#endif
#ifndef ODD_B
#define ODD_B 0    // 1: B read in place through four residue maps where N is not a multiple of 4 (above)
#endif
#ifndef ODD_A
#define ODD_A 0    // 1 (TF32X3, no cluster): A read in place through four residue maps where K is not a multiple of 4 (below)
#endif
#ifndef RN_BIAS
#define RN_BIAS 0      // TF32X3: A's small parts carry RN_BIAS * 2^-24 of the big ones: the tensor core's mean truncation, given back
#endif

constexpr int CONSUMERS = BN / 64;
constexpr int NTHREADS = 128 * (CONSUMERS + 1);
#ifdef THREADS
static_assert(THREADS == NTHREADS, "THREADS (the launch's block size) must be 128 * (BN / 64 + 1)");
#endif
static_assert(CLUSTER_N == 1 || CLUSTER_N == 2 || CLUSTER_N == 4, "CLUSTER_N: 1, 2 or 4");
static_assert((BM / CLUSTER_N) % 8 == 0, "each block's share of the A tile is whole 8-line swizzle groups");
static_assert(GROUP_M >= 1, "GROUP_M >= 1");
static_assert(SPLIT_SLOTS >= 0, "SPLIT_SLOTS >= 0 (0: no split-K)");
#if defined(SPLIT_MAX) && SPLIT_SLOTS > 0 && SPLIT_TREE
static_assert(SPLIT_MAX * CLUSTER_N <= 128, "a tree of at most 7 levels: SPLIT_MAX slices, times CLUSTER_N when a cluster shares K");
#endif
static_assert(SPLIT_FANIN == 2 || SPLIT_FANIN == 4 || SPLIT_FANIN == 8, "SPLIT_FANIN: 2, 4 or 8");
static_assert(RN_STEPS == 1 || RN_STEPS == 2 || RN_STEPS == 4, "RN_STEPS divides the BK / 8 = 4 k-steps of a tile");
static_assert(RN_BIAS >= 0 && RN_BIAS <= 64, "RN_BIAS: 2^-24 units of the big part, at most 2^-18");
static_assert(TF32_PARTS == 0 || TF32_PARTS == 1, "TF32_PARTS: 0 or 1");
static_assert(ODD_B == 0 || ODD_B == 1, "ODD_B: 0 or 1");
static_assert(ODD_A == 0 || (ODD_A == 1 && TF32X3 && CLUSTER_N == 1), "ODD_A: 0, or 1 with TF32X3 and no cluster");
static_assert(SMALL_SMALL == 0 || (SMALL_SMALL == 1 && TF32X3), "SMALL_SMALL: 0, or 1 with TF32X3");
static_assert(BK == 32, "one K-tile line is one 128-byte swizzle line: BK = 32 floats");
static_assert(BN % 64 == 0 && BN >= 64, "each consumer warpgroup owns 64 columns");
static_assert(BM == 64 || BM == 128 || BM == 256, "BM is wgmma's N: 64, 128 or 256 here");
// ODD_B's residue layout of B: per 32-column box four regions of BK / 4 lines of RB_W floats.
constexpr int RB_W = 40, RB_REGION = BK / 4 * RB_W, RB_BOX = 4 * RB_REGION;
constexpr int A_BYTES = BM * BK * 4, B_SWIZZLED_BYTES = BK * BN * 4;
constexpr int B_BYTES = ODD_B ? BN / 32 * RB_BOX * 4 : B_SWIZZLED_BYTES;  // room for either layout
static_assert(RB_REGION * 4 % 128 == 0, "each residue's box lands on a 128-byte boundary");
// TF32X3: A's small parts sit after the A tile in its slot, or, with SMALL_STAGES < STAGES, in a ring of
// their own after the slots (so that a 256-row tile's ring holds three slots of A and B in 208 KB).
constexpr bool SMALL_RING = TF32X3 && SMALL_STAGES < STAGES;
constexpr int B_OFFSET = A_BYTES * (1 + (TF32X3 && !SMALL_RING));
// ODD_A: A's residue boxes land in a staging area after B (four regions of BM / 4 lines of RA_W floats),
// which the splitting warps read to write the big and small parts in the swizzled layout.
constexpr int RA_W = 36, RA_REGION = BM / 4 * RA_W;
constexpr int STAGED_A_BYTES = ODD_A ? 4 * RA_REGION * 4 : 0;
static_assert(RA_REGION * 4 % 128 == 0, "each residue's box of A lands on a 128-byte boundary");
constexpr int SLOT_BYTES = B_OFFSET + B_BYTES + STAGED_A_BYTES;
constexpr int RING_BYTES = STAGES * SLOT_BYTES + (SMALL_RING ? SMALL_STAGES * A_BYTES : 0);
static_assert(A_BYTES % 1024 == 0 && B_OFFSET % 1024 == 0 && SLOT_BYTES % 1024 == 0, "swizzled slots stay 1024-byte aligned");
static_assert(SMALL_STAGES >= 1 && SMALL_STAGES <= STAGES, "SMALL_STAGES: 1..STAGES");
// Byte offset, from the ring's base, of the small parts of the block's K-tile number `it`.
__device__ __forceinline__ unsigned small_offset(int it) {
    return SMALL_RING ? STAGES * SLOT_BYTES + (it % SMALL_STAGES) * A_BYTES : (it % STAGES) * SLOT_BYTES + A_BYTES;
}
constexpr int EP_LD = 64 + 4;  // row pitch (floats) of the epilogue's staging of a 64-column slice
static_assert(CONSUMERS * BM * EP_LD * 4 <= RING_BYTES, "the epilogue stages in the ring");
constexpr int ACC = BM / 2;  // accumulators per consumer thread: 64 x BM over 128 threads
#if TF32X3 || TF32_PARTS
// Rows of the tile one part covers: the tile's, but half of a 256-row tile (see the consumer loop).
constexpr int PART_ROWS = BM == 256 ? 128 : BM, PART = PART_ROWS / 2;
#endif

#if SPLIT_SLOTS > 0
// Split-K scratch: one partial tile per block of a split launch, as float4 in the thread-private order
// (consumer c, float4 q of its accumulators, thread), so that both the store and the sum are coalesced.
__device__ float4 splitPartials[(size_t)SPLIT_SLOTS * BM * BN / 4];
__device__ unsigned int splitArrivals[SPLIT_SLOTS * 8];  // per tile and slice: one counter per tree level
__device__ __forceinline__ float4 add4(float4 a, float4 b) {
    return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}
// Sum of the partial tiles of children j .. j + W - 1 of a tree node (those below kids), as the binary tree
// would form it: halves first, then their sum. child0 points at child 0's float4, children stride apart.
// Branch-free, so that the loads of a node's every child and float4 can be in flight together: a child
// past kids is read at the last one's slot (every child below kids has stored its sum) and left out of
// the sum by a select.
template <int W>
__device__ __forceinline__ float4 span_sum(const float4* child0, size_t stride, int j, int kids) {
    if constexpr (W == 1) {
        return __ldcg(child0 + min(j, kids - 1) * stride);
    } else {
        const float4 a = span_sum<W / 2>(child0, stride, j, kids), b = span_sum<W / 2>(child0, stride, j + W / 2, kids);
        return j + W / 2 < kids ? add4(a, b) : a;
    }
}
#endif

// The tensor maps of A (box BK x BM) and B (box 32 x BK), written by the launcher before each launch.
struct __align__(64) TensorMap { unsigned long long opaque[16]; };
__device__ TensorMap tmap_a;
__device__ TensorMap tmap_b;
#if ODD_B
__device__ TensorMap tmap_br0, tmap_br1, tmap_br2, tmap_br3;  // B's residue maps (N % 4 != 0)
#if ODD_A
__device__ TensorMap tmap_ar0, tmap_ar1, tmap_ar2, tmap_ar3;  // A's residue maps (K % 4 != 0)
__device__ __forceinline__ const TensorMap* residue_map_a(int r) {
    return r == 0 ? &tmap_ar0 : r == 1 ? &tmap_ar1 : r == 2 ? &tmap_ar2 : &tmap_ar3;
}
#endif

__device__ __forceinline__ const TensorMap* residue_map(int r) {  // r: a constant after unrolling
    return r == 0 ? &tmap_br0 : r == 1 ? &tmap_br1 : r == 2 ? &tmap_br2 : &tmap_br3;
}
#endif

// Where column c0 (a multiple of 4) of a row k = r (mod 4) of B lands in its residue box's line (ODD_B).
__device__ __forceinline__ int rb_offset(int N, int r) {
    return ((r * N) & 3) + ((N & 3) == 2 && r >= 2 ? 4 : 0);
}
// Slice column (0..63) of a consumer's fragment row g of s = 2w + h, for N % 4 == rem (0: the swizzled
// layout's choice; see the comment at the top for why each).
__device__ __forceinline__ int frag_col(int g, int s, int rem) {
    const int in = rem == 0 ? 16 * (g / 4) + 4 * (s % 4) + g % 4
                 : (rem & 1) ? 4 * g + s % 4
                             : 8 * (g / 2) + 2 * (s % 4) + g % 2;
    return 32 * (s / 4) + in;
}

__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    asm volatile(
        "{\n.reg .pred done;\n"
        "wait_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra wait_%=;\n}\n" ::"r"(bar), "r"(parity) : "memory");
}
// A 2-D tile of the tensor behind `map` at element coordinates (x = inner, y = outer) into shared
// memory at `dst`; completes `bar`'s transaction count by the box's bytes (zeros where out of bounds).
__device__ __forceinline__ void tma_load_2d(unsigned dst, const TensorMap* map, int x, int y, unsigned bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
        ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(bar) : "memory");
}
// The same mbarrier in block `rank` of the cluster (its shared::cluster address), and an arrival on it.
__device__ __forceinline__ unsigned cluster_addr(unsigned bar, unsigned rank) {
    unsigned out;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(out) : "r"(bar), "r"(rank));
    return out;
}
__device__ __forceinline__ void mbar_arrive_cluster(unsigned bar) {  // (release at CTA scope, the default:
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(bar) : "memory");  // consumers only read)
}
// tma_load_2d into the same shared offset of every block in `mask`, completing each one's `bar`.
__device__ __forceinline__ void tma_load_2d_multicast(unsigned dst, const TensorMap* map, int x, int y, unsigned bar,
                                                      unsigned short mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1, {%2, %3}], [%4], %5;\n"
        ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(bar), "h"(mask) : "memory");
}
// All threads of the cluster (of the block, without clusters) meet here.
__device__ __forceinline__ void cluster_sync() {
    if (CLUSTER_N > 1)
        asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
    else
        __syncthreads();
}
__device__ __forceinline__ unsigned cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}

// wgmma descriptor of a K-major, 128-byte-swizzled operand starting at shared address `addr`.
__device__ __forceinline__ unsigned long long wgmma_desc(unsigned addr) {
    return (unsigned long long)((addr & 0x3FFFF) >> 4)      // start address, 16-byte units
           | (1ull << 16)                                    // leading offset: unused with this swizzle
           | ((unsigned long long)(1024 >> 4) << 32)         // 1024 bytes between 8-line groups
           | (1ull << 62);                                   // layout: 128-byte swizzle
}
__device__ __forceinline__ float tf32_rounded(float x) { return __uint_as_float(to_tf32(x)); }
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }

// d(64 x BM) += a(64 x 8, registers) * b(8 x BM, shared memory via descriptor): one warpgroup's wgmma.
#if 0
#elif BM == 64
__device__ __forceinline__ void wgmma_tf32(float (&d)[32], const unsigned (&a)[4], unsigned long long descB, int scaleD) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, {%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(descB), "r"(scaleD));
}
#endif
#if BM == 128 || (BM == 256 && (TF32X3 || TF32_PARTS))  // parts at BM = 256 are summed 128 rows at a time
__device__ __forceinline__ void wgmma_tf32(float (&d)[64], const unsigned (&a)[4], unsigned long long descB, int scaleD) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(descB), "r"(scaleD));
}
#endif
#if BM == 256
__device__ __forceinline__ void wgmma_tf32(float (&d)[128], const unsigned (&a)[4], unsigned long long descB, int scaleD) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
        "}, {%128, %129, %130, %131}, %132, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
          "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
          "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(descB), "r"(scaleD));
}
#endif

#if CLUSTER_N > 1
#define CLUSTER_ATTR __cluster_dims__(CLUSTER_N, 1, 1)  // a plain launch then runs in clusters of CLUSTER_N
#else
#define CLUSTER_ATTR
#endif

extern "C" __global__ void __launch_bounds__(NTHREADS, 1) CLUSTER_ATTR
sgemm_wgmma_tf32(int M, int N, int K, float alpha, const float* __restrict__ A,
                 const float* __restrict__ B, float beta, float* __restrict__ C) {
    extern __shared__ unsigned char smem_raw[];
    // Ring slots from the first 1024-byte boundary (the swizzle's period), barriers after them.
    const unsigned raw = smem_u32(smem_raw);
    const unsigned base = (raw + 1023u) & ~1023u;
    unsigned char* slots = smem_raw + (base - raw);
    const unsigned bars = base + RING_BYTES;  // full[0..STAGES), empty[0..STAGES), ready[0..STAGES)
    auto full = [&](int s) { return bars + 8u * s; };
    auto empty = [&](int s) { return bars + 8u * (STAGES + s); };
    auto ready = [&](int s) { return bars + 8u * (2 * STAGES + s); };  // TF32X3: A's tile split

    const int tid = threadIdx.x, wg = tid / 128;
    // Tile of this block. The grid's x is a whole number of clusters (the launcher rounds it up), and the
    // CLUSTER_N blocks of a cluster take adjacent column tiles of one row tile. Clusters go in grouped
    // order (as stage 11): linear id -> groups of GROUP_M tile rows, walked down each column of the group,
    // so that the clusters resident at one time share A and B tiles in L2.
    const unsigned rank = CLUSTER_N > 1 ? cluster_rank() : 0;
    const int pairsN = gridDim.x / CLUSTER_N, tilesM = gridDim.y;
    const int pair = blockIdx.y * pairsN + blockIdx.x / CLUSTER_N;
    const int perGroup = GROUP_M * pairsN, firstRow = (pair / perGroup) * GROUP_M;
    const int groupRows = min(tilesM - firstRow, GROUP_M);
    const int row0 = (firstRow + (pair % perGroup) % groupRows) * BM;
    const int pairCol = (pair % perGroup) / groupRows;
    // A cluster whose blocks after the first would all hold columns past N (N <= BN: one column of tiles)
    // shares K instead of A: every block of it takes the first block's tile and its own K-slices, loads
    // A's tile itself (no multicast) and counts only its own consumers; its partial tiles meet in the
    // split-K tree with the others'. Without this the spare blocks, one SM each, would compute nothing of
    // use (half of the SMs on a shape like 128 x 96 x 49152). Needs the workspace (it is the split-K
    // reduction) with room for every block of the launch, and slices of at least KSHARE_MIN_KTILES
    // K-tiles: measured (kernels/NOTES.md), slices of 10-16 K-tiles made small outputs slower and their
    // timings bimodal, while 32 and more (K-tiles per slice, not the shape, decide) gained 1.2-1.8x.
    const int numTiles = (K + BK - 1) / BK;
#if SPLIT_SLOTS > 0 && SPLIT_TREE && CLUSTER_N > 1
    const bool kShare = (pairCol * CLUSTER_N + 1) * BN >= N && gridDim.x * gridDim.y * gridDim.z <= SPLIT_SLOTS &&
                        numTiles >= KSHARE_MIN_KTILES * CLUSTER_N * (int)gridDim.z;
#else
    constexpr bool kShare = false;
#endif
    const int col0 = (pairCol * CLUSTER_N + (kShare ? 0 : rank)) * BN;
    // K-tiles of this block: all of them, or slice z of S (the last tile's columns past K arrive as zeros).
    // A K-sharing cluster cuts each of the launch's gridDim.z slices into CLUSTER_N, one per block.
    const int S = gridDim.z * (kShare ? CLUSTER_N : 1), z = kShare ? blockIdx.z * CLUSTER_N + rank : blockIdx.z;
    const int perSlice = (numTiles + S - 1) / S, kBegin = z * perSlice;
    const int myTiles = max(0, min(numTiles, kBegin + perSlice) - kBegin);
    const int rem = ODD_B ? N & 3 : 0;  // ODD_B: B in the residue layout where rem != 0
    const bool oddB = rem != 0;
    const bool oddA = ODD_A && (K & 3) != 0;  // ODD_A: A staged from its residue maps
#if SPLIT_SLOTS > 0
    if (S > 1 && gridDim.x * gridDim.y * gridDim.z > SPLIT_SLOTS)
        __trap();  // the launch plan keeps tiles * slices within the workspace: never write past it
#endif

    if (tid == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full(s), 1);              // the producer's arming arrival (+ the copies' bytes)
            mbar_init(empty(s), 4 * CONSUMERS * (kShare ? 1 : CLUSTER_N));  // per consumer warp of the cluster
                                                                              // (of the block when sharing K)
            if (TF32X3)
                mbar_init(ready(s), 3);         // one arrival per splitting warp of the producer warpgroup
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    cluster_sync();  // every block's barriers exist before any block copies into it or arrives on them

    if (wg == 0) {  // producer warpgroup: one thread issues every copy
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PRODUCER_REGS));
        if (tid == 0) {
            // The maps were written to global memory by a copy before the launch: make the tensor-map
            // proxy see those bytes, not a stale cached descriptor from an earlier launch.
            asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(&tmap_a) : "memory");
            asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(&tmap_b) : "memory");
#if ODD_B
            if (oddB)
#pragma unroll
                for (int r = 0; r < 4; ++r)
                    asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(residue_map(r)) : "memory");
#endif
#if ODD_A
            if (oddA)
#pragma unroll
                for (int r = 0; r < 4; ++r)
                    asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(residue_map_a(r)) : "memory");
#endif
            for (int it = 0; it < myTiles; ++it) {
                const int s = it % STAGES, kt = kBegin + it;
                if (it >= STAGES)
                    mbar_wait(empty(s), ((it / STAGES) - 1) & 1);  // the consumers are done with round - 1
                mbar_expect_tx(full(s), (oddA ? STAGED_A_BYTES : A_BYTES) + (oddB ? B_BYTES : B_SWIZZLED_BYTES));
                const unsigned slot = base + s * SLOT_BYTES;
                // This block's share of the A tile (rows rank * BM / CLUSTER_N ...) goes to every block
                // of the cluster; the others' shares arrive here the same way. A K-sharing block loads
                // every share itself.
                constexpr int SHARE = BM / CLUSTER_N;
#if ODD_A
                // Rows row0 + 4q + r of A, columns kt * BK .. + 31, from the 16-byte boundary before them
                // ((r K) % 4 floats before: kt * BK and row0 are multiples of 4).
                if (oddA) {
#pragma unroll
                    for (int r = 0; r < 4; ++r)
                        tma_load_2d(slot + B_OFFSET + B_BYTES + r * RA_REGION * 4, residue_map_a(r),
                                    r * K + kt * BK - ((r * K) & 3), row0 / 4, full(s));
                } else
#endif
                if (CLUSTER_N > 1 && !kShare)
                    tma_load_2d_multicast(slot + rank * SHARE * 128, &tmap_a, kt * BK, row0 + rank * SHARE, full(s),
                                          (unsigned short)((1u << CLUSTER_N) - 1));
                else
#pragma unroll
                    for (int r = 0; r < CLUSTER_N; ++r)
                        tma_load_2d(slot + r * SHARE * 128, &tmap_a, kt * BK, row0 + r * SHARE, full(s));
#if ODD_B
                if (oddB) {
#pragma unroll
                    for (int bx = 0; bx < BN / 32; ++bx)
#pragma unroll
                        for (int r = 0; r < 4; ++r)
                            tma_load_2d(slot + B_OFFSET + (bx * RB_BOX + r * RB_REGION) * 4, residue_map(r),
                                        r * N + col0 + 32 * bx - rb_offset(N, r), kt * (BK / 4), full(s));
                } else
#endif
#pragma unroll
                for (int bx = 0; bx < BN / 32; ++bx)
                    tma_load_2d(slot + B_OFFSET + bx * (BK * 32 * 4), &tmap_b, col0 + 32 * bx, kt * BK, full(s));
            }
        }
#if TF32X3
        // Warps 1-3 split each A tile in place once it has landed: big = tf32(x) rounded to nearest over the
        // tile itself (wgmma's truncating read of it is then exact), small = tf32(x - big) beside it or in
        // its own ring (same swizzled layout: the operation is elementwise). Rounding both halves leaves |x - big - small| at
        // most one FP32 ulp, half of what truncating the big part would. With RN_BIAS the small part is
        // tf32(x - big * (1 - RN_BIAS * 2^-24)), one FFMA in place of the FADD (the factor is exact in FP32,
        // and the sum is rounded once where x - big was exact): the consumers' big x small
        // products then carry that fraction of big x big, which is what the tensor core's truncations take
        // from each part on average (the consumer loop below). Below the small part's last TF32 place, the
        // added term shifts its rounding rather than its value, which over the products of a dot product
        // gives back the same amount on average. A fence makes the writes visible to wgmma's asynchronous
        // proxy before each warp's arrival on ready[s], which the consumers wait on.
        else if (tid >= 32) {
            for (int it = 0; it < myTiles; ++it) {
                const int s = it % STAGES;
                mbar_wait(full(s), (it / STAGES) & 1);
                if (SMALL_RING && it >= SMALL_STAGES) {  // the consumers are done with K-tile j's small parts
                    const int j = it - SMALL_STAGES;
                    mbar_wait(empty(j % STAGES), (j / STAGES) & 1);
                }
                float4* big = reinterpret_cast<float4*>(slots + s * SLOT_BYTES);
                float4* small = reinterpret_cast<float4*>(slots + small_offset(it));
#pragma unroll 1  // few registers here: the producer warpgroup runs on 40 (setmaxnreg)
                for (int i = tid - 32; i < A_BYTES / 16; i += 96) {
#if ODD_A
                    // float4 i of the swizzled tile is row m = i / 8, stored chunk i % 8, which holds columns
                    // 4 (i % 8 ^ m % 8) .. + 3; staged, row m is line m / 4 of region m % 4 from word (m K) % 4
                    float4 x;
                    if (oddA) {
                        const int m = i / 8, r = m % 4;
                        const float* src = reinterpret_cast<const float*>(slots + s * SLOT_BYTES + B_OFFSET + B_BYTES) +
                                           r * RA_REGION + (m / 4) * RA_W + ((r * K) & 3) + 4 * ((i % 8) ^ (m % 8));
                        x = make_float4(src[0], src[1], src[2], src[3]);
                    } else {
                        x = big[i];
                    }
#else
                    const float4 x = big[i];
#endif
                    const float4 hi = make_float4(tf32_rounded(x.x), tf32_rounded(x.y), tf32_rounded(x.z), tf32_rounded(x.w));
                    big[i] = hi;
#if RN_BIAS
                    // only where TF32 does not hold x: an element equal to its big part (an integer, a bfloat16
                    // value) has no small part, so products of such elements stay exact where the bias would
                    // add RN_BIAS * 2^-24 of them (an infinite x too: its small part is 0, not inf - inf)
                    constexpr float keep = RN_BIAS * 0x1p-24f - 1.0f;  // exact: -1 plus a multiple of 2^-24
                    const float4 rest = make_float4(x.x == hi.x ? 0.0f : fmaf(hi.x, keep, x.x),
                                                    x.y == hi.y ? 0.0f : fmaf(hi.y, keep, x.y),
                                                    x.z == hi.z ? 0.0f : fmaf(hi.z, keep, x.z),
                                                    x.w == hi.w ? 0.0f : fmaf(hi.w, keep, x.w));
#else
                    const float4 rest = make_float4(x.x - hi.x, x.y - hi.y, x.z - hi.z, x.w - hi.w);
#endif
                    small[i] = make_float4(__uint_as_float(tf32_rest(rest.x)), __uint_as_float(tf32_rest(rest.y)),
                                           __uint_as_float(tf32_rest(rest.z)), __uint_as_float(tf32_rest(rest.w)));
                }
                asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
                __syncwarp();
                if (tid % 32 == 0)
                    mbar_arrive(ready(s));
            }
        }
#endif
    } else {  // consumer warpgroups
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CONSUMER_REGS));
        const int c = wg - 1;                         // this consumer's 64-column slice of the tile
        const int ti = tid % 128, w = ti / 32, lane = ti % 32, g = lane / 4, t = lane % 4;

        // Float offsets of this lane's four fragment elements inside a slot's B tile (k-step 0), and the
        // floats from one k-step of 8 to the next (8 swizzled lines, or 2 lines of each residue's region).
        int frag[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int h = i & 1, k = t + 4 * (i >> 1), s = 2 * w + h;
#if ODD_B
            const int box = 2 * c + s / 4, n = frag_col(g, s, rem) % 32;
            frag[i] = oddB ? box * RB_BOX + t * RB_REGION + (i >> 1) * RB_W + rb_offset(N, t) + n
                           : box * (BK * 32) + k * 32 + (((n / 4) ^ (k & 7)) * 4) + n % 4;
#else
            const int box = 2 * c + s / 4, chunk = 4 * (g / 4) + s % 4;
            frag[i] = box * (BK * 32) + k * 32 + ((chunk ^ (k & 7)) * 4) + g % 4;
#endif
        }
        const int kStep = oddB ? 2 * RB_W : 8 * 32;

        float d[ACC];
#pragma unroll
        for (int i = 0; i < ACC; ++i)
            d[i] = 0.0f;

        // One K-tile: wait for its slot, load and round this lane's fragments of B^T, issue the BK / 8 wgmma
        // as one batch, wait for it, and free the slot in every block of the cluster (each one's producer
        // copies into it). The fragment loads of the next tile wait for the batch: with two consumer
        // warpgroups taking turns on the tensor cores that costs less than leaving a batch in flight, which
        // makes ptxas serialise the wgmma (warning C7513; measured in kernels/NOTES.md).
        //
        // TF32X3 = 1 (stage 18): B^T's fragments split into big = tf32(x) and small = tf32(x - big) in
        // registers; the A tile arrives split by the producer's warps 1-3 (big over the tile, small beside
        // it or in the small parts' ring), signalled on ready[s], so the two consumer warpgroups never wait for each other inside the
        // loop. The three products of RN_STEPS k-steps (small x big, big x small, big x
        // big) sum from zero in `part`, which one FFMA per element adds into the running sum d: the tensor
        // core's accumulator truncates at every wgmma, the FFMA rounds to nearest (stage 16's lesson), so d
        // never takes a truncated addition, and fewer k-steps per part leave fewer truncations in it.
        // Those truncations still leave each part short by a fraction of its last place, always toward
        // zero: where signs do not cancel (all-positive inputs) that bias is the error. RN_BIAS gives its
        // mean back through A's small parts, which carry RN_BIAS * 2^-24 of their big parts (the producer's
        // split, above): the big x small products then add that much of big x big to each part, for free.
        //
        // Wide-range inputs: a TF32 small part is about 2^-11 of its value, so for |x| below about 2^-115 it
        // is subnormal and keeps only a few bits. Per K-tile, each fragment row of B^T (a column of C) whose
        // largest value lies below 2^-100 is scaled up by a power of two before the split (exact), and its
        // part is scaled back down by the same power inside the FFMA (exact but for C's own underflow).
        // Rows at or above 2^-100 are left alone, so nothing can overflow that would not overflow anyway.
        //
        // BM = 256: the part of all 256 rows (128 registers beside d's 128) does not fit, so each RN group
        // runs as two halves of the A tile (rows 0-127, then 128-255), each summed into a 64-register part
        // and added into its half of d: the B^T fragments, loaded, scaled and split once, serve both.
#if TF32X3 || TF32_PARTS
        float part[PART];
#endif
        for (int it = 0; it < myTiles; ++it) {
            const int s = it % STAGES;
            mbar_wait(TF32X3 ? ready(s) : full(s), (it / STAGES) & 1);
            unsigned char* slot = slots + s * SLOT_BYTES;
            const float* bt = reinterpret_cast<const float*>(slot + B_OFFSET);
            const unsigned aTile = base + s * SLOT_BYTES;
#if TF32X3
            const unsigned aSmallTile = base + small_offset(it);
#endif
            unsigned a[BK / 8][4];
#if TF32X3
            unsigned aSmall[BK / 8][4];
            float x[BK / 8][4];
            // Largest magnitude in fragment row h (elements i = h, h + 2) over this lane's 8 values of it, then
            // over the 4 lanes (t = 0..3) that hold the rest of the row's 32; its exponent sets the row's scale.
            float mx[2] = {0.0f, 0.0f};
#pragma unroll
            for (int kk = 0; kk < BK / 8; ++kk)
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    x[kk][i] = bt[frag[i] + kk * kStep];
                    mx[i & 1] = fmaxf(mx[i & 1], fabsf(x[kk][i]));
                }
            int shift[2];
            float down[2];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xFFFFFFFFu, mx[h], 1));
                mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xFFFFFFFFu, mx[h], 2));
                shift[h] = max(0, (127 - 100) - (__float_as_int(mx[h]) >> 23));  // 0 unless the max < 2^-100
                down[h] = __int_as_float((127 - shift[h]) << 23);
            }
            if (__any_sync(0xFFFFFFFFu, (shift[0] | shift[1]) != 0)) {  // rare: skipped warp-wide otherwise
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const float up = __int_as_float((127 + shift[h]) << 23);
#pragma unroll
                    for (int kk = 0; kk < BK / 8; ++kk) {
                        x[kk][h] *= up;
                        x[kk][h + 2] *= up;
                    }
                }
            }
#pragma unroll
            for (int kk = 0; kk < BK / 8; ++kk)
#pragma unroll
                for (int i = 0; i < 4; ++i)
                    split(x[kk][i], a[kk][i], aSmall[kk][i]);
#pragma unroll
            for (int k0 = 0; k0 < BK / 8; k0 += RN_STEPS)
#pragma unroll
                for (int hf = 0; hf < BM / PART_ROWS; ++hf) {
                    // Rows hf * PART_ROWS.. of the tile: 128 bytes a row, whole 1024-byte swizzle groups.
                    const unsigned aPart = aTile + hf * PART_ROWS * 128;
                    wgmma_fence();
#if SMALL_SMALL
#pragma unroll
                    for (int kk = k0; kk < k0 + RN_STEPS; ++kk)  // small x small, the smallest terms first
                        wgmma_tf32(part, aSmall[kk], wgmma_desc(aSmallTile + hf * PART_ROWS * 128 + kk * 32), kk > k0);
#endif
#pragma unroll
                    for (int kk = k0; kk < k0 + RN_STEPS; ++kk)  // the first from zero: part = product
                        wgmma_tf32(part, aSmall[kk], wgmma_desc(aPart + kk * 32), SMALL_SMALL || kk > k0);
#pragma unroll
                    for (int kk = k0; kk < k0 + RN_STEPS; ++kk)
                        wgmma_tf32(part, a[kk], wgmma_desc(aSmallTile + hf * PART_ROWS * 128 + kk * 32), 1);
#pragma unroll
                    for (int kk = k0; kk < k0 + RN_STEPS; ++kk)
                        wgmma_tf32(part, a[kk], wgmma_desc(aPart + kk * 32), 1);
                    wgmma_commit();
                    wgmma_wait<0>();
                    // d[4j + 2h + e] is on fragment row h and tile row 8j + 2t + e: the half's rows are
                    // d[hf * PART ..], in the part's own order.
#pragma unroll
                    for (int i = 0; i < PART; ++i)
                        d[hf * PART + i] = fmaf(part[i], down[(i >> 1) & 1], d[hf * PART + i]);
                }
#elif TF32_PARTS
            // TF32 in parts: the tensor core truncates its FP32 sum at every addition, and one accumulator over
            // all of K takes K / 8 truncations, each short of the last place in the same direction. Here
            // RN_STEPS k-steps sum from zero in `part` (a few truncations, of a part, not of the whole sum),
            // and one FADD, rounded to nearest, adds it into d: the error grows with K as a rounded sum's
            // does. BM = 256 runs each part as two halves of 128 rows, as the TF32X3 path does.
#pragma unroll
            for (int kk = 0; kk < BK / 8; ++kk)
#pragma unroll
                for (int i = 0; i < 4; ++i)
                    a[kk][i] = to_tf32(bt[frag[i] + kk * kStep]);
#pragma unroll
            for (int k0 = 0; k0 < BK / 8; k0 += RN_STEPS)
#pragma unroll
                for (int hf = 0; hf < BM / PART_ROWS; ++hf) {
                    const unsigned aPart = aTile + hf * PART_ROWS * 128;
                    wgmma_fence();
#pragma unroll
                    for (int kk = k0; kk < k0 + RN_STEPS; ++kk)  // the first from zero: part = product
                        wgmma_tf32(part, a[kk], wgmma_desc(aPart + kk * 32), kk > k0);
                    wgmma_commit();
                    wgmma_wait<0>();
#pragma unroll
                    for (int i = 0; i < PART; ++i)
                        d[hf * PART + i] += part[i];
                }
#else
#pragma unroll
            for (int kk = 0; kk < BK / 8; ++kk)
#pragma unroll
                for (int i = 0; i < 4; ++i)
                    a[kk][i] = to_tf32(bt[frag[i] + kk * kStep]);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BK / 8; ++kk)
                wgmma_tf32(d, a[kk], wgmma_desc(aTile + kk * 32), 1);
            wgmma_commit();
            wgmma_wait<0>();
#endif
            __syncwarp();
            if (CLUSTER_N == 1 || kShare) {
                if (lane == 0)
                    mbar_arrive(empty(s));
            } else if (lane < CLUSTER_N) {
                mbar_arrive_cluster(cluster_addr(empty(s), lane));
            }
        }

#if SPLIT_SLOTS > 0
        // Split-K. Tiles past N (a cluster's spare block) take no part. Fences order each thread's stores
        // before its block's count, and the count before the loads of what other blocks stored (from L2).
        //
        // SPLIT_TREE = 1: the S slices of a tile meet in a fixed tree over slice indices, SPLIT_FANIN children
        // a node. A block holds the sum of a span of slices [lo, lo + F^l); where sibling spans exist it stores
        // that sum at slot lo and counts itself in at the parent; all but the last to arrive stop, the last
        // adds the others' sums and climbs. The root writes C. Whatever the order of arrival, every node adds
        // the same sums in the same pairs as the binary tree would (and a + b = b + a exactly), so the result
        // never depends on timing, nor on the fan-in; the critical path is log_F(S) rounds of a store, a
        // fence, a count and F - 1 reads of a tile, instead of the S reads of one last block.
        //
        // SPLIT_TREE = 0: every block stores its partial; the last to count itself in sums the S partials in
        // slice order, in double, and writes C.
        if (S > 1) {
            __shared__ unsigned goOn;
            // Workspace slots of this tile's slices: gridDim.z per block of the launch, from its tile's first;
            // a K-sharing cluster's S = CLUSTER_N * gridDim.z slices use the slots of all its blocks.
            const int tile = blockIdx.y * gridDim.x + blockIdx.x - (kShare ? rank : 0);
            const size_t slot0 = (size_t)tile * gridDim.z;
            if (col0 >= N)
                goto done;
            float4* parts = splitPartials + slot0 * CONSUMERS * (ACC / 4) * 128 + c * (ACC / 4) * 128 + ti;
            const size_t slice = (size_t)CONSUMERS * (ACC / 4) * 128;  // float4s of one partial tile
#if SPLIT_TREE
            if (S > 128)
                __trap();  // 8 counters per slot: at most 7 levels
            // SPLIT_FANIN children a node: 2 is the binary tree; 4 (8) fuses two (three) of its levels into one,
            // whose last block to count itself in adds the node's children pairwise, in the binary tree's order,
            // so C is the same bit for bit with fewer stores, fences and counts on the critical path.
            int lo = z;
            for (int l = 0, span = 1; span < S; ++l, span *= SPLIT_FANIN) {
                const int parent = lo - lo % (SPLIT_FANIN * span);
                const int kids = min(SPLIT_FANIN, (S - parent + span - 1) / span);  // child spans that exist
                if (kids == 1)  // no sibling span at this level: climb alone
                    continue;   // (lo == parent)
#pragma unroll
                for (int q = 0; q < ACC / 4; ++q)
                    __stcg(parts + lo * slice + q * 128, make_float4(d[4 * q], d[4 * q + 1], d[4 * q + 2], d[4 * q + 3]));
                __threadfence();
                asm volatile("bar.sync 1, %0;\n" ::"n"(128 * CONSUMERS) : "memory");
                if (tid == 128) {
                    unsigned* count = &splitArrivals[(slot0 + parent) * 8 + l];
                    const bool last = atomicAdd(count, 1u) == (unsigned)(kids - 1);
                    if (last)
                        *count = 0;  // every child has counted: ready for the next launch
                    goOn = last;
                }
                asm volatile("bar.sync 1, %0;\n" ::"n"(128 * CONSUMERS) : "memory");
                if (!goOn)
                    goto done;
                __threadfence();
                // This block's child is me; at each of the node's binary levels (w = 1, 2, 4) its span's sum
                // adds the sum of the sibling span of w children, which the tree below (span_sum) forms, where
                // that span exists (a branch the whole block takes alike, around all of the level's loads).
                const int me = (lo - parent) / span;
                const size_t stride = (size_t)span * slice;
#pragma unroll
                for (int w = 1; w < SPLIT_FANIN; w *= 2) {
                    const int j = (me ^ w) & ~(w - 1);
                    if (j >= kids)
                        continue;
#pragma unroll
                    for (int q = 0; q < ACC / 4; ++q) {
                        const float4* child0 = parts + parent * slice + q * 128;
                        const float4 v = w == 1 ? span_sum<1>(child0, stride, j, kids)
                                       : w == 2 ? span_sum<2>(child0, stride, j, kids) : span_sum<4>(child0, stride, j, kids);
                        d[4 * q] += v.x; d[4 * q + 1] += v.y; d[4 * q + 2] += v.z; d[4 * q + 3] += v.w;
                    }
                }
                lo = parent;
            }
#else
#pragma unroll
            for (int q = 0; q < ACC / 4; ++q)
                __stcg(parts + z * slice + q * 128, make_float4(d[4 * q], d[4 * q + 1], d[4 * q + 2], d[4 * q + 3]));
            __threadfence();
            asm volatile("bar.sync 1, %0;\n" ::"n"(128 * CONSUMERS) : "memory");
            if (tid == 128) {
                const bool last = atomicAdd(&splitArrivals[tile], 1u) == (unsigned)(S - 1);
                if (last)
                    splitArrivals[tile] = 0;  // every slice has counted: ready for the next launch
                goOn = last;
            }
            asm volatile("bar.sync 1, %0;\n" ::"n"(128 * CONSUMERS) : "memory");
            if (!goOn)
                goto done;
            __threadfence();
#pragma unroll
            for (int q = 0; q < ACC / 4; q += 2) {  // 8 accumulators at a time, 4 slices' loads in flight
                double sum[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll 4
                for (int zz = 0; zz < S; ++zz) {
                    const float4 u = __ldcg(parts + zz * slice + q * 128), v = __ldcg(parts + zz * slice + (q + 1) * 128);
                    sum[0] += u.x; sum[1] += u.y; sum[2] += u.z; sum[3] += u.w;
                    sum[4] += v.x; sum[5] += v.y; sum[6] += v.z; sum[7] += v.w;
                }
#pragma unroll
                for (int e = 0; e < 8; ++e)
                    d[4 * q + e] = (float)sum[e];
            }
#endif
        }
#endif

        // Epilogue, through shared memory so that C is read and written along its rows, coalesced.
        // d[4j + 2h + e] is (C^T)[r][m'] with r = 16w + g + 8h, m' = 8j + 2t + e: C row row0 + m', column
        // col0 + 64c + n(r), n() the fragment-row permutation above. Once both consumer warpgroups are past
        // the ring (every copy into it has landed: each was waited for), each stages its 64-column slice
        // there, rows EP_LD floats apart, then streams it row by row: in 16-byte pieces where C's rows start
        // on 16-byte boundaries (a warp on two rows of 64 floats), else one float a lane (below).
        asm volatile("bar.sync 1, %0;\n" ::"n"(128 * CONSUMERS) : "memory");
        float* stage = reinterpret_cast<float*>(slots) + c * (BM * EP_LD);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#if ODD_B
            const int s = 2 * w + h, n = frag_col(g, s, rem);
#else
            const int s = 2 * w + h, n = 32 * (s / 4) + 16 * (g / 4) + 4 * (s % 4) + g % 4;
#endif
#pragma unroll
            for (int j = 0; j < BM / 8; ++j)
#pragma unroll
                for (int e = 0; e < 2; ++e)
                    stage[(8 * j + 2 * t + e) * EP_LD + n] = d[4 * j + 2 * h + e];
        }
        asm volatile("bar.sync %0, 128;\n" ::"r"(2 + c) : "memory");
        if ((N & 3) == 0 && aligned16(C)) {  // rows on 16-byte boundaries: a piece is wholly inside N or outside
            // The loads of C for 8 pieces issued together before any of their stores (as below).
#pragma unroll 1
            for (int it0 = 0; it0 < BM * 16 / 128; it0 += 8) {
                float4 old[8];
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    const int idx = (it0 + j) * 128 + ti, row = row0 + idx / 16, col = col0 + 64 * c + 4 * (idx % 16);
                    old[j] = beta != 0.0f && row < M && col < N
                                 ? *reinterpret_cast<const float4*>(C + (size_t)row * N + col)
                                 : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                }
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    const int idx = (it0 + j) * 128 + ti, r = idx / 16, q = idx % 16;
                    const int row = row0 + r, col = col0 + 64 * c + 4 * q;
                    if (row < M && col < N) {
                        float4 v = *reinterpret_cast<const float4*>(&stage[r * EP_LD + 4 * q]);
                        v.x *= alpha; v.y *= alpha; v.z *= alpha; v.w *= alpha;
                        if (beta != 0.0f) {
                            v.x += beta * old[j].x; v.y += beta * old[j].y; v.z += beta * old[j].z; v.w += beta * old[j].w;
                        }
                        *reinterpret_cast<float4*>(C + (size_t)row * N + col) = v;
                    }
                }
            }
        } else {
            // N not a multiple of 4 (B then re-pitched by the launcher or read through residue maps; C is
            // always the caller's), or C's base off 16 bytes: rows of C off 16-byte boundaries, so one column a lane, a warp on
            // 32 consecutive floats of a row (a warpgroup's 128 threads on two rows of 64), and the
            // loads of C for 8 rows issued together before any store (a store may alias a later load as
            // far as the compiler knows, so it would otherwise wait out each load's latency in turn).
            const int q = ti % 64, col = col0 + 64 * c + q;
#pragma unroll 1
            for (int r0 = 0; r0 < BM; r0 += 16) {
                float old[8];
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    const int row = row0 + r0 + 2 * j + ti / 64;
                    old[j] = beta != 0.0f && row < M && col < N ? C[(size_t)row * N + col] : 0.0f;
                }
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    const int r = r0 + 2 * j + ti / 64, row = row0 + r;
                    if (row < M && col < N) {
                        float x = stage[r * EP_LD + q] * alpha;  // the float4 form's arithmetic
                        if (beta != 0.0f)
                            x += beta * old[j];
                        C[(size_t)row * N + col] = x;
                    }
                }
            }
        }
    }
#if SPLIT_SLOTS > 0
done:  // a split block that is not its tile's last, or a tile past N: no epilogue
#endif
    __syncwarp();
    cluster_sync();  // no block leaves while another may still copy into it or arrive on its barriers
}
