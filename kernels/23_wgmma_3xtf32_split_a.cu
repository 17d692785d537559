// Stage 23 (3xTF32) - stage 18's product with A split before it: a kernel of its own writes A's big and
// small TF32 parts once, as two planes of a workspace buffer, and the product reads both by TMA. Built for
// sm_90a (wgmma, setmaxnreg, bulk tensor copies). Precision class 3xtf32, held to the strict-FP32 limit.
//
// Up to three kernels, launched in this order on one stream (the phases of the stage's config entry):
//   split_a_tf32       planes[i][k] = big = tf32(A[i][k]) rounded to nearest, planes[M + i][k] = small =
//                      tf32(A[i][k] - big), rows KP floats apart (K padded to a multiple of 4 with zeros)
//   sgemm_wgmma_3xtf32 C = alpha A B + beta C from three TF32 products per k-step (below); with S > 1
//                      K-slices, block z's partial product (slice z of K) into parts[z] instead
//   split_k_sum        only where S > 1: C = alpha (parts[0] + ... + parts[S-1]) + beta C, summed in double
//
// Why a pass of its own. In stage 18 three warps of the producer warpgroup split each A tile after it lands
// (read it, write its big part in place and its small part beside it): the consumers wait for them, not
// for the copy, and at 256-row tiles with a ring of two slots for the small parts they wait on the
// consumers in turn. Measured on an H200 (kernels/notes/history/24-3xtf32-split-before-the-product.md):
// with the split made once before the product the 256-row tile's tensor pipe went from 56% to 83% busy,
// for a pass over A of 12 bytes an element (read once, two planes written).
//
// The product is stage 18's (kernels/17_wgmma_tf32.cu, TF32X3 = 1) without what this stage does not need:
// TF32 wgmma reads its shared-memory operands only K-major, and only A is, so the kernel computes
// C^T = B^T A^T: wgmma's register operand (64 x 8) is a slice of B^T, loaded by each thread from the B tile
// with 32-bit LDS in wgmma's fragment layout and split into big and small parts in registers; its
// shared-memory operand (8 x 128, K-major, through a descriptor) is a 128-row half of A's big or small tile
// exactly as TMA stored it. The accumulator is (C^T)'s 64 x BM slice: row r of it is a column of C.
//
// Block tile BM x BN of C (BM 128 or 256, BN = 64 per consumer warpgroup), K-tiles of BK = 32 floats, one
// producer warpgroup (one thread issues every copy) and BN / 64 consumer warpgroups. Shared memory per ring
// slot, 1024-byte aligned, all filled by TMA with the 128-byte swizzle: A's big tile (BM lines of 32
// floats; in each group of 8 lines the 16-byte chunk c of line m is stored at chunk c ^ (m % 8)), then A's
// small tile in the same layout (or, with SMALL_STAGES < STAGES, in a ring of SMALL_STAGES slots of its own
// after the STAGES slots), then B's tile as BN / 32 boxes of 32 (k) lines x 32 (n) floats, same swizzle.
//
// Register fragment of wgmma's A (TF32, per warp w of the warpgroup, lane = 4 g + t):
//   a0 = (row 16w + g, k t), a1 = (row 16w + g + 8, k t), a2 = (row 16w + g, k t + 4), a3 = (16w + g + 8, t + 4).
// Fragment row 16w + g + 8h (h = 0 for a0, a2) stands for slice column n = 32 (s / 4) + 16 (g / 4) +
// 4 (s % 4) + g % 4 of B, s = 2w + h: the 32 lanes of one load then read lines k = t (or t + 4) and chunks
// 4 (g / 4) + s % 4, eight different chunks after the swizzle, and g % 4 picks the word: 32 banks.
//
// Pipeline: STAGES ring slots, two mbarriers each. full[s]: the producer's thread arms it with the slot's
// byte count and issues the copies (A's big tile, A's small tile, B's boxes), which complete it. empty[s]:
// one arrival per consumer warp once the wgmma that read the slot are done. The producer waits on empty
// before refilling a slot (and, with the small parts' own ring, on the empty of the K-tile that last used
// the small slot), the consumers on full; each tracks the phase parity of its round. The producer
// warpgroup gives most of its registers to the consumers (setmaxnreg).
//
// Split-K: where the output tiles leave most SMs idle (small outputs, long K), the launch plan gives the
// product's grid a third dimension of S K-slices (tiles * S at most one block per SM). Slice z runs the
// block's K-tiles [z P, z P + P), P = ceil(ceil(K / BK) / S); a last slice that reaches past K reads zeros
// there (TMA fills them), so every slice runs the same loop. Each block writes its partial tile, unscaled,
// into plane z of the workspace `parts` (M x N floats a plane), and split_k_sum adds the S planes in slice
// order, in double, and applies alpha and beta once: the result does not depend on which block finished
// first, and each partial sums at most P K-tiles, which bounds the error a long K builds up in one sum.
//
// Shapes: any M and K (the planes pad K; TMA fills rows past M and columns past KP with zeros); N a
// multiple of 4 (B's rows on 16-byte boundaries, which its tensor map needs: the config's runs_when).

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
#define STAGES 3
#endif
#ifndef SMALL_STAGES
#define SMALL_STAGES 2   // slots for A's small parts (fewer than STAGES: a ring of their own)
#endif
#ifndef GROUP_M
#define GROUP_M 8        // grouped tile order: consecutive blocks walk GROUP_M tile rows before the next column
#endif
#ifndef RN_STEPS
#define RN_STEPS 2       // k-steps of 8 whose products sum from zero before one rounded addition into d
#endif
#ifndef RN_BIAS
#define RN_BIAS 1        // A's small parts carry RN_BIAS * 2^-24 of the big ones: the tensor core's mean truncation
#endif
#ifndef PRODUCER_REGS
#define PRODUCER_REGS 40
#endif
#ifndef CONSUMER_REGS
#define CONSUMER_REGS 232
#endif

constexpr int CONSUMERS = BN / 64;
constexpr int NTHREADS = 128 * (CONSUMERS + 1);
#ifdef THREADS
static_assert(THREADS == NTHREADS, "THREADS (the launch's block size) must be 128 * (BN / 64 + 1)");
#endif
static_assert(BK == 32, "one K-tile line is one 128-byte swizzle line: BK = 32 floats");
static_assert(BN % 64 == 0 && BN >= 64, "each consumer warpgroup owns 64 columns");
static_assert(BM == 128 || BM == 256, "BM: one or two 128-row parts (wgmma's N = 128)");
static_assert(GROUP_M >= 1, "GROUP_M >= 1");
static_assert(RN_STEPS == 1 || RN_STEPS == 2 || RN_STEPS == 4, "RN_STEPS divides the BK / 8 = 4 k-steps of a tile");
static_assert(RN_BIAS >= 0 && RN_BIAS <= 64, "RN_BIAS: 2^-24 units of the big part, at most 2^-18");
static_assert(SMALL_STAGES >= 1 && SMALL_STAGES <= STAGES, "SMALL_STAGES: 1..STAGES");

constexpr int A_BYTES = BM * BK * 4, B_BYTES = BK * BN * 4;
constexpr bool SMALL_RING = SMALL_STAGES < STAGES;
constexpr int B_OFFSET = A_BYTES * (SMALL_RING ? 1 : 2);
constexpr int SLOT_BYTES = B_OFFSET + B_BYTES;
constexpr int RING_BYTES = STAGES * SLOT_BYTES + (SMALL_RING ? SMALL_STAGES * A_BYTES : 0);
static_assert(A_BYTES % 1024 == 0 && B_OFFSET % 1024 == 0 && SLOT_BYTES % 1024 == 0, "swizzled slots stay 1024-byte aligned");
// Byte offset, from the ring's base, of the small parts of the block's K-tile number `it`.
__device__ __forceinline__ unsigned small_offset(int it) {
    return SMALL_RING ? STAGES * SLOT_BYTES + (it % SMALL_STAGES) * A_BYTES : (it % STAGES) * SLOT_BYTES + A_BYTES;
}
constexpr int EP_LD = 64 + 4;  // row pitch (floats) of the epilogue's staging of a 64-column slice
static_assert(CONSUMERS * BM * EP_LD * 4 <= RING_BYTES, "the epilogue stages in the ring");
constexpr int ACC = BM / 2;    // accumulators per consumer thread: 64 x BM over 128 threads
constexpr int PART_ROWS = 128, PART = PART_ROWS / 2;  // rows one part covers (a 256-row tile in two halves)

// The tensor maps of A's planes (box BK x BM over 2M rows of KP floats) and of B (box 32 x BK), written by
// the launcher when the shape or an address changes.
struct __align__(64) TensorMap { unsigned long long opaque[16]; };
__device__ TensorMap tmap_a;
__device__ TensorMap tmap_b;

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

// d(64 x 128) += a(64 x 8, registers) * b(8 x 128, shared memory via descriptor): one warpgroup's wgmma;
// scaleD = 0 writes the product instead of adding it.
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

// ---- the split: A's big and small parts, once --------------------------------------------------------
//
// big = tf32(x) rounded to nearest (wgmma's truncating read of it is then exact), small = tf32(x - big):
// rounding both halves leaves |x - big - small| at most one FP32 ulp, half of what truncating the big part
// would. With RN_BIAS the small part is tf32(x - big (1 - RN_BIAS 2^-24)), one FFMA in place of the FADD (the
// factor is exact in FP32, and the sum is rounded once where x - big was exact): the big x small products
// then carry that fraction of big x big, which is what the tensor core's truncations take from each part on
// average (the consumer loop below). An element TF32 holds (an integer, a bfloat16 value, an infinity) has no
// small part, so products of such elements stay exact. A thread takes a group of 4 of a row's KP columns
// (one 16-byte load where K is a multiple of 4 and A is aligned), by a grid-stride loop.
extern "C" __global__ void __launch_bounds__(256) split_a_tf32(int M, int K, int KP, const float* __restrict__ A,
                                                              float* __restrict__ planes) {
    const size_t groups = (size_t)M * (KP / 4);
    const bool vec = (K & 3) == 0 && aligned16(A);
    for (size_t q = blockIdx.x * (size_t)blockDim.x + threadIdx.x; q < groups; q += (size_t)gridDim.x * blockDim.x) {
        const int i = (int)(q / (KP / 4)), k = 4 * (int)(q % (KP / 4));
        const float* a = A + (size_t)i * K + k;
        float x[4];
        if (vec) {
            const float4 v = __ldg(reinterpret_cast<const float4*>(a));
            x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
        } else {
#pragma unroll
            for (int e = 0; e < 4; ++e) x[e] = k + e < K ? __ldg(a + e) : 0.0f;
        }
        float hi[4], lo[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            hi[e] = tf32_rounded(x[e]);
            constexpr float keep = RN_BIAS * 0x1p-24f - 1.0f;  // exact: -1 plus a multiple of 2^-24
            const float rest = x[e] == hi[e] ? 0.0f : fmaf(hi[e], keep, x[e]);
            lo[e] = __uint_as_float(tf32_rest(rest));
        }
        *reinterpret_cast<float4*>(planes + (size_t)i * KP + k) = make_float4(hi[0], hi[1], hi[2], hi[3]);
        *reinterpret_cast<float4*>(planes + ((size_t)M + i) * KP + k) = make_float4(lo[0], lo[1], lo[2], lo[3]);
    }
}

// ---- the product ------------------------------------------------------------------------------------

// Row and column of C where this block's tile starts, in grouped order (as stage 11): linear id -> groups
// of GROUP_M tile rows, walked down each column of the group, so that the blocks resident at one time
// share A and B tiles in L2. Read from the block index through volatile moves, so that the epilogue reads
// it again instead of keeping it: held across the consumer loop, the tile's origin and its K-tile count
// went to local memory (16 bytes, one value reloaded every K-tile), and the product ran 13% slower at
// 4096^3 (kernels/notes/history/25-3xtf32-no-spill-and-split-k.md).
__device__ __forceinline__ int2 tile_origin() {
    unsigned bx, by, nx, ny;
    asm volatile("mov.u32 %0, %%ctaid.x;\n" : "=r"(bx));
    asm volatile("mov.u32 %0, %%ctaid.y;\n" : "=r"(by));
    asm volatile("mov.u32 %0, %%nctaid.x;\n" : "=r"(nx));
    asm volatile("mov.u32 %0, %%nctaid.y;\n" : "=r"(ny));
    const int tilesN = (int)nx, tilesM = (int)ny, id = (int)by * tilesN + (int)bx;
    const int perGroup = GROUP_M * tilesN, firstRow = (id / perGroup) * GROUP_M;
    const int groupRows = min(tilesM - firstRow, GROUP_M);
    return make_int2((firstRow + (id % perGroup) % groupRows) * BM, ((id % perGroup) / groupRows) * BN);
}
// K-tiles of one slice: the K-tiles of K over gridDim.z slices, rounded up (all of them without split-K);
// the loops count a slice's K-tiles by it * gridDim.z * BK < K, which holds for exactly as many.
__device__ __forceinline__ int slice_tiles(int K) { return ((K + BK - 1) / BK + gridDim.z - 1) / gridDim.z; }

extern "C" __global__ void __launch_bounds__(NTHREADS, 1)
sgemm_wgmma_3xtf32(int M, int N, int K, float alpha, const float* __restrict__ A,
                   const float* __restrict__ B, float beta, float* __restrict__ C, float* __restrict__ parts) {
    (void)A;  // read through tmap_a's planes (split_a_tf32)
    (void)B;  // read through tmap_b
    extern __shared__ unsigned char smem_raw[];
    // Ring slots from the first 1024-byte boundary (the swizzle's period), barriers after them.
    const unsigned raw = smem_u32(smem_raw);
    const unsigned base = (raw + 1023u) & ~1023u;
    unsigned char* slots = smem_raw + (base - raw);
    const unsigned bars = base + RING_BYTES;  // full[0..STAGES), empty[0..STAGES)
    auto full = [&](int s) { return bars + 8u * s; };
    auto empty = [&](int s) { return bars + 8u * (STAGES + s); };

    const int tid = threadIdx.x, wg = tid / 128;

    if (tid == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full(s), 1);                 // the producer's arming arrival (+ the copies' bytes)
            mbar_init(empty(s), 4 * CONSUMERS);    // one arrival per consumer warp
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) {  // producer warpgroup: one thread issues every copy
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PRODUCER_REGS));
        if (tid == 0) {
            // The maps were written to global memory by a copy before the launch: make the tensor-map
            // proxy see those bytes, not a stale cached descriptor from an earlier launch.
            asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(&tmap_a) : "memory");
            asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(&tmap_b) : "memory");
            const int2 o = tile_origin();
            const int row0 = o.x, col0 = o.y, k0 = blockIdx.z * slice_tiles(K) * BK;
            // `it` counts this slice's K-tiles (ring slot and parity), by the consumers' bound (below);
            // k0 + it * BK is the K-tile's column
            for (int it = 0; it * (int)gridDim.z * BK < K; ++it) {
                const int s = it % STAGES;
                if (it >= STAGES)
                    mbar_wait(empty(s), ((it / STAGES) - 1) & 1);  // the consumers are done with round - 1
                if (SMALL_RING && it >= SMALL_STAGES) {  // and with K-tile j, the last user of this small slot
                    const int j = it - SMALL_STAGES;
                    mbar_wait(empty(j % STAGES), (j / STAGES) & 1);
                }
                const unsigned slot = base + s * SLOT_BYTES;
                mbar_expect_tx(full(s), 2 * A_BYTES + B_BYTES);
                // A's big part: rows row0.. of plane 0 (rows past M of the last row tile are plane 1's first
                // rows or zeros; they only reach rows of C past M, which are not stored); its small part:
                // the same rows of plane 1, M rows further.
                tma_load_2d(slot, &tmap_a, k0 + it * BK, row0, full(s));
                tma_load_2d(base + small_offset(it), &tmap_a, k0 + it * BK, M + row0, full(s));
#pragma unroll
                for (int bx = 0; bx < BN / 32; ++bx)
                    tma_load_2d(slot + B_OFFSET + bx * (BK * 32 * 4), &tmap_b, col0 + 32 * bx, k0 + it * BK, full(s));
            }
        }
    } else {  // consumer warpgroups
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CONSUMER_REGS));
        const int c = wg - 1;                         // this consumer's 64-column slice of the tile
        const int ti = tid % 128, w = ti / 32, lane = ti % 32, g = lane / 4, t = lane % 4;

        // Float offsets of this lane's four fragment elements inside a slot's B tile (k-step 0); a k-step of
        // 8 is 8 swizzled lines further.
        int frag[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int h = i & 1, k = t + 4 * (i >> 1), s = 2 * w + h;
            const int box = 2 * c + s / 4, chunk = 4 * (g / 4) + s % 4;
            frag[i] = box * (BK * 32) + k * 32 + ((chunk ^ (k & 7)) * 4) + g % 4;
        }
        constexpr int kStep = 8 * 32;

        float d[ACC];
#pragma unroll
        for (int i = 0; i < ACC; ++i)
            d[i] = 0.0f;

        // One K-tile: wait for its slot, load this lane's fragments of B^T and split them into big =
        // tf32(x) and small = tf32(x - big) in registers. The three products of RN_STEPS k-steps (small x
        // big, big x small, big x big) sum from zero in `part`, which one FFMA per element adds into the
        // running sum d: the tensor core's accumulator truncates at every wgmma, the FFMA rounds to nearest
        // (stage 16's lesson), so d never takes a truncated addition, and fewer k-steps per part leave fewer
        // truncations in it. Those truncations still leave each part short by a fraction of its last place,
        // always toward zero; RN_BIAS gives the mean back through A's small parts (split_a_tf32).
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
        float part[PART];
        // it < ceil(ceil(K / BK) / S) exactly when it * S * BK < K: a bound of K and gridDim.z alone, kept nowhere
        for (int it = 0; it * (int)gridDim.z * BK < K; ++it) {
            const int s = it % STAGES;
            mbar_wait(full(s), (it / STAGES) & 1);
            const float* bt = reinterpret_cast<const float*>(slots + s * SLOT_BYTES + B_OFFSET);
            const unsigned aTile = base + s * SLOT_BYTES;
            const unsigned aSmallTile = base + small_offset(it);
            unsigned a[BK / 8][4];
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
                    // Rows hf * 128.. of the tile: 128 bytes a row, whole 1024-byte swizzle groups; a k-step
                    // of 8 floats is 32 bytes into each line.
                    const unsigned big = aTile + hf * PART_ROWS * 128, small = aSmallTile + hf * PART_ROWS * 128;
                    wgmma_fence();
#pragma unroll
                    for (int kk = k0; kk < k0 + RN_STEPS; ++kk)  // the first from zero: part = product
                        wgmma_tf32(part, aSmall[kk], wgmma_desc(big + kk * 32), kk > k0);
#pragma unroll
                    for (int kk = k0; kk < k0 + RN_STEPS; ++kk)
                        wgmma_tf32(part, a[kk], wgmma_desc(small + kk * 32), 1);
#pragma unroll
                    for (int kk = k0; kk < k0 + RN_STEPS; ++kk)
                        wgmma_tf32(part, a[kk], wgmma_desc(big + kk * 32), 1);
                    wgmma_commit();
                    wgmma_wait<0>();
                    // d[4j + 2h + e] is on fragment row h and tile row 8j + 2t + e: the half's rows are
                    // d[hf * PART ..], in the part's own order.
#pragma unroll
                    for (int i = 0; i < PART; ++i)
                        d[hf * PART + i] = fmaf(part[i], down[(i >> 1) & 1], d[hf * PART + i]);
                }
            __syncwarp();
            if (lane == 0)
                mbar_arrive(empty(s));
        }

        // Epilogue, through shared memory so that C is read and written along its rows, coalesced.
        // d[4j + 2h + e] is (C^T)[r][m'] with r = 16w + g + 8h, m' = 8j + 2t + e: C row row0 + m', column
        // col0 + 64c + n(r), n() the fragment-row permutation above. Once both consumer warpgroups are past
        // the ring (every copy into it has landed: each was waited for), each stages its 64-column slice
        // there, rows EP_LD floats apart, then streams it row by row: in 16-byte pieces where C's base is on
        // a 16-byte boundary (N is a multiple of 4: so are its rows), else one float a lane (below).
        asm volatile("bar.sync 1, %0;\n" ::"n"(128 * CONSUMERS) : "memory");
        const int2 o = tile_origin();  // read again, not kept across the loop
        const int row0 = o.x, col0 = o.y;
        // Split-K: the partial tile, unscaled, into this slice's plane of `parts` (split_k_sum applies alpha
        // and beta); beta = 0 there, so nothing is read back.
        const bool split = gridDim.z > 1;
        float* out = split ? parts + (size_t)blockIdx.z * M * N : C;
        const float alphaOut = split ? 1.0f : alpha, betaOut = split ? 0.0f : beta;
        float* stage = reinterpret_cast<float*>(slots) + c * (BM * EP_LD);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int s = 2 * w + h, n = 32 * (s / 4) + 16 * (g / 4) + 4 * (s % 4) + g % 4;
#pragma unroll
            for (int j = 0; j < BM / 8; ++j)
#pragma unroll
                for (int e = 0; e < 2; ++e)
                    stage[(8 * j + 2 * t + e) * EP_LD + n] = d[4 * j + 2 * h + e];
        }
        asm volatile("bar.sync %0, 128;\n" ::"r"(2 + c) : "memory");
        if ((N & 3) == 0 && aligned16(out)) {  // rows on 16-byte boundaries: a piece is wholly inside N or outside
            // The loads of C for 8 pieces issued together before any of their stores (a store may alias a
            // later load as far as the compiler knows, so it would otherwise wait out each load in turn).
#pragma unroll 1
            for (int it0 = 0; it0 < BM * 16 / 128; it0 += 8) {
                float4 old[8];
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    const int idx = (it0 + j) * 128 + ti, row = row0 + idx / 16, col = col0 + 64 * c + 4 * (idx % 16);
                    old[j] = betaOut != 0.0f && row < M && col < N
                                 ? *reinterpret_cast<const float4*>(out + (size_t)row * N + col)
                                 : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                }
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    const int idx = (it0 + j) * 128 + ti, r = idx / 16, q = idx % 16;
                    const int row = row0 + r, col = col0 + 64 * c + 4 * q;
                    if (row < M && col < N) {
                        float4 v = *reinterpret_cast<const float4*>(&stage[r * EP_LD + 4 * q]);
                        v.x *= alphaOut; v.y *= alphaOut; v.z *= alphaOut; v.w *= alphaOut;
                        if (betaOut != 0.0f) {
                            v.x += betaOut * old[j].x; v.y += betaOut * old[j].y; v.z += betaOut * old[j].z; v.w += betaOut * old[j].w;
                        }
                        *reinterpret_cast<float4*>(out + (size_t)row * N + col) = v;
                    }
                }
            }
        } else {
            // C's base off 16 bytes: one column a lane, a warp on 32 consecutive floats of a row (a
            // warpgroup's 128 threads on two rows of 64), the loads of C for 8 rows issued together.
            const int q = ti % 64, col = col0 + 64 * c + q;
#pragma unroll 1
            for (int r0 = 0; r0 < BM; r0 += 16) {
                float old[8];
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    const int row = row0 + r0 + 2 * j + ti / 64;
                    old[j] = betaOut != 0.0f && row < M && col < N ? out[(size_t)row * N + col] : 0.0f;
                }
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    const int r = r0 + 2 * j + ti / 64, row = row0 + r;
                    if (row < M && col < N) {
                        float x = stage[r * EP_LD + q] * alphaOut;  // the float4 form's arithmetic
                        if (betaOut != 0.0f)
                            x += betaOut * old[j];
                        out[(size_t)row * N + col] = x;
                    }
                }
            }
        }
    }
    __syncwarp();
    __syncthreads();  // no thread leaves while a copy into the block's shared memory may still be landing
}

// ---- the split-K sum (launched only where S > 1) -----------------------------------------------------
//
// C = alpha (parts[0] + ... + parts[S-1]) + beta C. A group of L lanes of one warp takes 4 consecutive floats
// of C (N is a multiple of 4, so a group never straddles a row, and the planes' groups are 16-byte aligned):
// lane j adds slices j, j + L, j + 2L, ... in double, and the group's L sums meet in a fixed tree of shuffles
// (offsets L / 2, ..., 1). L is the largest power of two, at most 32 and at most the power of two at or above
// S, at which the grid still holds every (group, lane) pair in one turn: 1 for a large C (a thread a group,
// the planes in turn, by a grid-stride loop), up to 32 for a small C of many planes, where one thread a
// group left 12 blocks waiting on their loads (128 planes of 128 x 96: 32.6 us; journal page 25). L, and so
// the order of every addition, is fixed by the shape (the grid is the config's, from M, N and S), whichever
// block runs when. Double has 29 bits more than FP32, so these additions round far below the result's one
// rounding to FP32; the result is then scaled as the product's epilogue scales (sum * alpha, plus beta * C
// where beta != 0: C is not read at beta = 0, so a C of NaNs is overwritten).
extern "C" __global__ void __launch_bounds__(256) split_k_sum(int M, int N, int S, float alpha,
                                                             const float* __restrict__ parts, float beta,
                                                             float* __restrict__ C) {
    const size_t plane = (size_t)M * N, groups = plane / 4;
    const size_t stride = (size_t)gridDim.x * blockDim.x;    // a multiple of 32: warps stay on whole groups
    const int top = min(32, S <= 1 ? 1 : 1 << (32 - __clz(S - 1)));
    int L = 1;
    while (L < top && groups * (2 * L) <= stride)
        L *= 2;
    const int shift = __ffs(L) - 1, lane = threadIdx.x % 32, j = lane & (L - 1);
    const size_t pairs = groups * L;                         // (group, lane) pairs; a warp holds 32 / L groups
    const bool vec = aligned16(C);
    // the loop's test on the warp's first pair: every lane of a warp takes each turn, for the shuffles
    for (size_t w0 = blockIdx.x * (size_t)blockDim.x + threadIdx.x - lane; w0 < pairs; w0 += stride) {
        const size_t q = (w0 + lane) >> shift;
        const bool mine = w0 + lane < pairs;
        double acc[4] = {0.0, 0.0, 0.0, 0.0};
        if (mine)
            for (int z = j; z < S; z += L) {
                const float4 v = __ldcs(reinterpret_cast<const float4*>(parts + z * plane) + q);  // read once
                acc[0] += v.x, acc[1] += v.y, acc[2] += v.z, acc[3] += v.w;
            }
        for (int off = L / 2; off > 0; off /= 2)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                acc[e] += __shfl_xor_sync(0xFFFFFFFFu, acc[e], off);
        if (!mine || j != 0)
            continue;
        float* c = C + 4 * q;
        float r[4];
#pragma unroll
        for (int e = 0; e < 4; ++e)
            r[e] = (float)acc[e] * alpha;
        if (beta != 0.0f) {
            if (vec) {
                const float4 old = *reinterpret_cast<const float4*>(c);
                r[0] += beta * old.x, r[1] += beta * old.y, r[2] += beta * old.z, r[3] += beta * old.w;
            } else {
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    r[e] += beta * c[e];
            }
        }
        if (vec) {
            *reinterpret_cast<float4*>(c) = make_float4(r[0], r[1], r[2], r[3]);
        } else {
#pragma unroll
            for (int e = 0; e < 4; ++e)
                c[e] = r[e];
        }
    }
}
