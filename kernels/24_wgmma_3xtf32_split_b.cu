// Stage 24 (3xTF32) - the mirror of stage 23: B split before the product instead of A. A kernel of its own
// writes B^T's big and small TF32 parts once, as two planes of a workspace buffer, and the product reads
// them by TMA as wgmma's shared-memory operand; A's tiles, copied by TMA as they are, are split in
// registers. Built for sm_90a (wgmma, setmaxnreg, bulk tensor copies). Precision class 3xtf32, held to the
// strict-FP32 limit.
//
// Up to five kernels, launched in this order on one stream (the phases of the stage's config entry):
//   bt_column_max      pmax[y][j] = the largest |B[k][j]| over the K rows of part y of G (grid y)
//   bt_column_scale    colscale[j] = 1 / u_j, u_j = 2^shift_j (1 unless column j's largest value, over the G
//                      parts, lies below 2^-100)
//   split_bt_tf32      planes[j][k] = big = tf32(u_j B[k][j]) rounded to nearest, planes[N + j][k] = small =
//                      tf32(u_j B[k][j] - big), rows K floats apart: B transposed, scaled and split in one pass
//   sgemm_wgmma_3xtf32 C = alpha A B + beta C from three TF32 products per k-step (below); with S > 1
//                      K-slices, block z's partial product (slice z of K) into parts[z] instead
//   split_k_sum        only where S > 1: C = alpha (parts[0] + ... + parts[S-1]) + beta C, summed in double
//
// Why the mirror. Stage 23's pass over A costs 12 bytes an element of A (read once, two planes written),
// then 8 more bytes an element each time a column of tiles reads the planes: where A is much the larger
// operand (16384 x 192 x 2048: 3.1 M elements of A against 0.4 M of B) that pass is 108 of its 252 us. Here
// the pass is over B, and A is read once a column of tiles, 4 bytes an element, as it is.
//
// The product is stage 23's with the operands' roles swapped. TF32 wgmma reads its shared-memory operands
// only K-major: B^T's planes are (rows of K floats), so the kernel computes C = A B directly: wgmma's
// register operand (64 x 8) is a slice of A, loaded by each thread from A's tile with 32-bit LDS in wgmma's
// fragment layout and split into big and small parts in registers; its shared-memory operand (8 x 128,
// K-major, through a descriptor) is a 128-column half of B^T's big or small tile exactly as TMA stored it.
// The accumulator is C's 64 x BN slice of the consumer warpgroup.
//
// Block tile BM x BN of C (BM = 64 per consumer warpgroup, BN 128 or 256), K-tiles of BK = 32 floats, one
// producer warpgroup (one thread issues every copy) and BM / 64 consumer warpgroups. Shared memory per ring
// slot, 1024-byte aligned, all filled by TMA with the 128-byte swizzle: B^T's big tile (BN lines of 32
// floats; in each group of 8 lines the 16-byte chunk c of line m is stored at chunk c ^ (m % 8)), then B^T's
// small tile in the same layout (or, with SMALL_STAGES < STAGES, in a ring of SMALL_STAGES slots of its own
// after the STAGES slots), then A's tile: BM lines of 32 floats (k), same swizzle.
//
// Register fragment of wgmma's A (TF32, per warp w of the warpgroup, lane = 4 g + t):
//   a0 = (row 16w + g, k t), a1 = (row 16w + g + 8, k t), a2 = (row 16w + g, k t + 4), a3 = (16w + g + 8, t + 4),
// rows of the consumer's 64 (tile row 64 c + ...). Row r of A's tile is swizzle line r, and r % 8 = g: the
// lanes of one load read chunk (2 kk + i / 2) ^ g of their lines, word t, eight different chunks: 32 banks.
//
// Pipeline and split-K: as stage 23. Wide-range inputs: as stage 23 for the operand split in registers (each
// fragment row of A, a row of C, scaled per K-tile); the operand split before the product is scaled per
// column of B over all of K (a scale per K-tile would have to be undone per column of the part, 64 factors a
// thread), and the epilogue multiplies column j of C by colscale[j]. Without it, a column of values near
// 2^-120 kept only a few bits of its small parts (subnormal in FP32, then cut to TF32's 10): 7.6e-6 against
// cuBLAS's 1.5e-7 on the check's extreme inputs (reports/probes/split_b, journal page 26).
// Shapes: any M and N; K a multiple of 4 (A's rows on 16-byte boundaries, which its tensor map needs, and
// the planes' rows too: the config's runs_when); N a multiple of 4 where K is split (the sum's groups of 4
// floats of C: the config's runs_when as well).

#include <cstdint>

#include "common.cuh"

#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 256
#endif
#ifndef BK
#define BK 32
#endif
#ifndef STAGES
#define STAGES 3
#endif
#ifndef SMALL_STAGES
#define SMALL_STAGES 2   // slots for B^T's small parts (fewer than STAGES: a ring of their own)
#endif
#ifndef GROUP_M
#define GROUP_M 8        // grouped tile order: consecutive blocks walk GROUP_M tile rows before the next column
#endif
#ifndef RN_STEPS
#define RN_STEPS 2       // k-steps of 8 whose products sum from zero before one rounded addition into d
#endif
#ifndef RN_BIAS
#define RN_BIAS 1        // B's small parts carry RN_BIAS * 2^-24 of the big ones: the tensor core's mean truncation
#endif
#ifndef PRODUCER_REGS
#define PRODUCER_REGS 40
#endif
#ifndef CONSUMER_REGS
#define CONSUMER_REGS 232
#endif

constexpr int CONSUMERS = BM / 64;
constexpr int NTHREADS = 128 * (CONSUMERS + 1);
#ifdef THREADS
static_assert(THREADS == NTHREADS, "THREADS (the launch's block size) must be 128 * (BM / 64 + 1)");
#endif
static_assert(BK == 32, "one K-tile line is one 128-byte swizzle line: BK = 32 floats");
static_assert(BM % 64 == 0 && BM >= 64 && BM <= 128, "each consumer warpgroup owns 64 rows; one or two of them");
static_assert(BN == 128 || BN == 256, "BN: one or two 128-column parts (wgmma's N = 128)");
static_assert(GROUP_M >= 1, "GROUP_M >= 1");
static_assert(RN_STEPS == 1 || RN_STEPS == 2 || RN_STEPS == 4, "RN_STEPS divides the BK / 8 = 4 k-steps of a tile");
static_assert(RN_BIAS >= 0 && RN_BIAS <= 64, "RN_BIAS: 2^-24 units of the big part, at most 2^-18");
static_assert(SMALL_STAGES >= 1 && SMALL_STAGES <= STAGES, "SMALL_STAGES: 1..STAGES");

constexpr int B_BYTES = BN * BK * 4, A_BYTES = BM * BK * 4;  // one plane's tile of B^T; A's tile
constexpr bool SMALL_RING = SMALL_STAGES < STAGES;
constexpr int A_OFFSET = B_BYTES * (SMALL_RING ? 1 : 2);
constexpr int SLOT_BYTES = A_OFFSET + A_BYTES;
constexpr int RING_BYTES = STAGES * SLOT_BYTES + (SMALL_RING ? SMALL_STAGES * B_BYTES : 0);
static_assert(A_BYTES % 1024 == 0 && A_OFFSET % 1024 == 0 && SLOT_BYTES % 1024 == 0, "swizzled slots stay 1024-byte aligned");
// Byte offset, from the ring's base, of the small parts of the block's K-tile number `it`.
__device__ __forceinline__ unsigned small_offset(int it) {
    return SMALL_RING ? STAGES * SLOT_BYTES + (it % SMALL_STAGES) * B_BYTES : (it % STAGES) * SLOT_BYTES + B_BYTES;
}
constexpr int EP_LD = BN + 8;  // row pitch (floats) of the epilogue's staging of a consumer's 64 rows
static_assert(CONSUMERS * 64 * EP_LD * 4 <= RING_BYTES, "the epilogue stages in the ring");
constexpr int ACC = BN / 2;    // accumulators per consumer thread: 64 x BN over 128 threads
constexpr int PART_COLS = 128, PART = PART_COLS / 2;  // columns one part covers (a 256-column tile in two halves)

// The tensor maps of A (box BK x BM over M rows of K floats) and of B^T's planes (box BK x BN over 2N rows of
// K floats), written by the launcher when the shape or an address changes.
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

// ---- the split: B^T's big and small parts, once ------------------------------------------------------
//
// big = tf32(x) rounded to nearest (wgmma's truncating read of it is then exact), small = tf32(x - big):
// rounding both halves leaves |x - big - small| at most one FP32 ulp, half of what truncating the big part
// would. With RN_BIAS the small part is tf32(x - big (1 - RN_BIAS 2^-24)), one FFMA in place of the FADD (the
// factor is exact in FP32, and the sum is rounded once where x - big was exact): the A x small products then
// carry that fraction of A x big, which is what the tensor core's truncations take from each part on average
// (the consumer loop below). An element TF32 holds (an integer, a bfloat16 value, an infinity) has no small
// part, so products of such elements stay exact.
//
// B is K x N with rows N floats apart; the planes hold B^T, rows K floats apart. Column j's scale comes first:
// bt_column_max takes each column's largest magnitude over its part of K (grid y: G parts, rows y * 8 + ty,
// + 8 G, ...; a block of 256 threads on 32 columns, 8 rows a turn, each read a whole 128-byte line), and
// bt_column_scale makes each column's scale from its G partial maxima, once (a thread a column), and
// split_bt_tf32 moves 32 x 64 tiles through shared memory in 16-byte pieces, so that both its reads (along B's rows) and its writes (along the planes' rows) are whole
// lines: 64 columns of B a block (grid x), tiles of 32 rows of K (grid y, a grid-stride loop past 65535).
extern "C" __global__ void __launch_bounds__(256) bt_column_max(int K, int N, const float* __restrict__ B,
                                                               float* __restrict__ pmax) {
    __shared__ float red[8][33];
    const int tx = threadIdx.x % 32, ty = threadIdx.x / 32, j = blockIdx.x * 32 + tx;
    float m[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // four loads in flight a thread
    if (j < N) {
        const int step = 8 * gridDim.y;
        int k = blockIdx.y * 8 + ty;
        for (; k + 3 * step < K; k += 4 * step)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                m[e] = fmaxf(m[e], fabsf(__ldg(B + (size_t)(k + e * step) * N + j)));
        for (; k < K; k += step)
            m[0] = fmaxf(m[0], fabsf(__ldg(B + (size_t)k * N + j)));
    }
    red[ty][tx] = fmaxf(fmaxf(m[0], m[1]), fmaxf(m[2], m[3]));
    __syncthreads();
    if (ty == 0 && j < N) {
        float r = red[0][tx];
#pragma unroll
        for (int y = 1; y < 8; ++y)
            r = fmaxf(r, red[y][tx]);
        pmax[(size_t)blockIdx.y * N + j] = r;
    }
}

// 2^shift lifts a largest value below 2^-100 to at least that (exact; the formula of stage 23's fragment rows),
// 1 otherwise; colscale holds its inverse, which the product's epilogue multiplies into the column of C.
extern "C" __global__ void __launch_bounds__(256) bt_column_scale(int N, int G, const float* __restrict__ pmax,
                                                                 float* __restrict__ colscale) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= N)
        return;
    float m = 0.0f;
    for (int y = 0; y < G; ++y)
        m = fmaxf(m, pmax[(size_t)y * N + j]);
    const int shift = max(0, (127 - 100) - (__float_as_int(m) >> 23));
    colscale[j] = __int_as_float((127 - shift) << 23);
}

extern "C" __global__ void __launch_bounds__(256) split_bt_tf32(int K, int N, const float* __restrict__ B,
                                                               const float* __restrict__ colscale,
                                                               float* __restrict__ planes) {
    __shared__ float tile[32][65];  // 32 rows of K x 64 columns of B; one column of padding (below)
    __shared__ float up[64];
    const int tid = threadIdx.x, j0 = blockIdx.x * 64;
    if (tid < 64)  // u_j = 2^shift from 2^-shift, by its exponent: exact whatever the build's division
        up[tid] = j0 + tid < N ? __int_as_float((254 << 23) - __float_as_int(colscale[j0 + tid])) : 1.0f;
    const bool vec = (N & 3) == 0 && aligned16(B);  // B's rows on 16-byte boundaries: float4 reads
    for (int k0 = blockIdx.y * 32; k0 < K; k0 += gridDim.y * 32) {
        __syncthreads();  // up[] written (first turn), the tile's last reads done (later turns)
        // In: 32 rows x 64 columns, a thread 4 consecutive columns of one row (16 a row), two turns.
        for (int e = tid; e < 32 * 16; e += 256) {
            const int r = e / 16, q = e % 16, k = k0 + r, j = j0 + 4 * q;
            float v[4];
            if (vec && k < K && j < N) {  // N a multiple of 4: j < N means j + 3 < N
                const float4 t4 = __ldg(reinterpret_cast<const float4*>(B + (size_t)k * N + j));
                v[0] = t4.x, v[1] = t4.y, v[2] = t4.z, v[3] = t4.w;
            } else {
#pragma unroll
                for (int c = 0; c < 4; ++c)
                    v[c] = k < K && j + c < N ? __ldg(B + (size_t)k * N + j + c) : 0.0f;
            }
#pragma unroll
            for (int c = 0; c < 4; ++c)
                tile[r][4 * q + c] = v[c];
        }
        __syncthreads();
        // Out: 64 rows of the planes (columns of B) x 32 of K, a thread 4 consecutive k of one row (8 a row),
        // two turns, one 16-byte store a plane (K a multiple of 4: the rows and the groups are aligned). The
        // reads tile[4p + c][jj] of one warp (4 rows jj, 8 groups p) fall on banks 4p + c + jj: all 32.
        for (int e = tid; e < 64 * 8; e += 256) {
            const int jj = e / 8, p = e % 8, j = j0 + jj, k = k0 + 4 * p;
            if (j < N && k < K) {
                float hi[4], lo[4];
#pragma unroll
                for (int c = 0; c < 4; ++c) {
                    const float x = tile[4 * p + c][jj] * up[jj];  // u_j B[k + c][j]
                    hi[c] = tf32_rounded(x);
                    constexpr float keep = RN_BIAS * 0x1p-24f - 1.0f;  // exact: -1 plus a multiple of 2^-24
                    const float rest = x == hi[c] ? 0.0f : fmaf(hi[c], keep, x);
                    lo[c] = __uint_as_float(tf32_rest(rest));
                }
                *reinterpret_cast<float4*>(planes + (size_t)j * K + k) = make_float4(hi[0], hi[1], hi[2], hi[3]);
                *reinterpret_cast<float4*>(planes + ((size_t)N + j) * K + k) = make_float4(lo[0], lo[1], lo[2], lo[3]);
            }
        }
    }
}

// ---- the product ------------------------------------------------------------------------------------

// Row and column of C where this block's tile starts, in grouped order (as stage 11): linear id -> groups
// of GROUP_M tile rows, walked down each column of the group, so that the blocks resident at one time
// share A and B tiles in L2. Read from the block index through volatile moves, so that the epilogue reads
// it again instead of keeping it: held across the consumer loop, the tile's origin and its K-tile count
// went to local memory in stage 23 (16 bytes, one value reloaded every K-tile), and its product ran 13% slower
// at 4096^3 (kernels/notes/history/25-3xtf32-no-spill-and-split-k.md).
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
                   const float* __restrict__ B, float beta, float* __restrict__ C, float* __restrict__ parts,
                   const float* __restrict__ colscale) {
    (void)A;  // read through tmap_a
    (void)B;  // read through tmap_b's planes (split_bt_tf32)
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
                mbar_expect_tx(full(s), 2 * B_BYTES + A_BYTES);
                // B^T's big part: rows col0.. of plane 0 (rows past N of the last column tile are plane 1's
                // first rows or zeros; they only reach columns of C past N, which are not stored); its small
                // part: the same rows of plane 1, N rows further; A's tile: rows row0.. (zeros past M and K).
                tma_load_2d(slot, &tmap_b, k0 + it * BK, col0, full(s));
                tma_load_2d(base + small_offset(it), &tmap_b, k0 + it * BK, N + col0, full(s));
                tma_load_2d(slot + A_OFFSET, &tmap_a, k0 + it * BK, row0, full(s));
            }
        }
    } else {  // consumer warpgroups
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CONSUMER_REGS));
        const int c = wg - 1;                         // this consumer's 64-row slice of the tile
        const int ti = tid % 128, w = ti / 32, lane = ti % 32, g = lane / 4, t = lane % 4;
        // Float offset of this lane's fragment line h (tile row 64 c + 16 w + g + 8 h) in A's tile, and of its
        // word t: the chunk, (2 kk + i / 2) ^ g, is added per load.
        const int line0 = (64 * c + 16 * w + g) * 32 + t;

        float d[ACC];
#pragma unroll
        for (int i = 0; i < ACC; ++i)
            d[i] = 0.0f;

        // One K-tile: wait for its slot, load this lane's fragments of A and split them into big =
        // tf32(x) and small = tf32(x - big) in registers. The three products of RN_STEPS k-steps (small x
        // big, big x small, big x big) sum from zero in `part`, which one FFMA per element adds into the
        // running sum d: the tensor core's accumulator truncates at every wgmma, the FFMA rounds to nearest
        // (stage 16's lesson), so d never takes a truncated addition, and fewer k-steps per part leave fewer
        // truncations in it. Those truncations still leave each part short by a fraction of its last place,
        // always toward zero; RN_BIAS gives the mean back through B's small parts (split_bt_tf32).
        //
        // Wide-range inputs: a TF32 small part is about 2^-11 of its value, so for |x| below about 2^-115 it
        // is subnormal and keeps only a few bits. Per K-tile, each fragment row of A (a row of C) whose
        // largest value lies below 2^-100 is scaled up by a power of two before the split (exact), and its
        // part is scaled back down by the same power inside the FFMA (exact but for C's own underflow).
        // Rows at or above 2^-100 are left alone, so nothing can overflow that would not overflow anyway.
        //
        // BN = 256: the part of all 256 columns (128 registers beside d's 128) does not fit, so each RN group
        // runs as two halves of the B^T tile (columns 0-127, then 128-255), each summed into a 64-register
        // part and added into its half of d: the A fragments, loaded, scaled and split once, serve both.
        float part[PART];
        // it < ceil(ceil(K / BK) / S) exactly when it * S * BK < K: a bound of K and gridDim.z alone, kept nowhere
        for (int it = 0; it * (int)gridDim.z * BK < K; ++it) {
            const int s = it % STAGES;
            mbar_wait(full(s), (it / STAGES) & 1);
            const float* at = reinterpret_cast<const float*>(slots + s * SLOT_BYTES + A_OFFSET);
            const unsigned bTile = base + s * SLOT_BYTES;
            const unsigned bSmallTile = base + small_offset(it);
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
                    x[kk][i] = at[line0 + (i & 1) * (8 * 32) + (((2 * kk + (i >> 1)) ^ g) << 2)];
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
                for (int hf = 0; hf < BN / PART_COLS; ++hf) {
                    // Columns hf * 128.. of the tile: 128 bytes a line, whole 1024-byte swizzle groups; a k-step
                    // of 8 floats is 32 bytes into each line.
                    const unsigned big = bTile + hf * PART_COLS * 128, small = bSmallTile + hf * PART_COLS * 128;
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
                    // part[4j + 2h + e] is on fragment row h and column 8j + 2t + e of the half: the half's
                    // columns are d[hf * PART ..], in the part's own order.
#pragma unroll
                    for (int i = 0; i < PART; ++i)
                        d[hf * PART + i] = fmaf(part[i], down[(i >> 1) & 1], d[hf * PART + i]);
                }
            __syncwarp();
            if (lane == 0)
                mbar_arrive(empty(s));
        }

        // Epilogue, through shared memory so that C is read and written along its rows, coalesced.
        // d[hf * PART + 4j + 2h + e] is C[row0 + 64c + 16w + g + 8h][col0 + 128 hf + 8j + 2t + e]. Once every
        // consumer warpgroup is past the ring (every copy into it has landed: each was waited for), each
        // stages its 64 rows there, EP_LD floats apart (8-byte stores, a half-warp's 16 on 32 banks), then
        // streams them row by row: in 16-byte pieces where C's base is on a 16-byte boundary and N is a
        // multiple of 4, else one float a lane (below).
        asm volatile("bar.sync 1, %0;\n" ::"n"(128 * CONSUMERS) : "memory");
        const int2 o = tile_origin();  // read again, not kept across the loop
        const int row0 = o.x + 64 * c, col0 = o.y;
        // Split-K: the partial tile, unscaled, into this slice's plane of `parts` (split_k_sum applies alpha
        // and beta); beta = 0 there, so nothing is read back.
        const bool split = gridDim.z > 1;
        float* out = split ? parts + (size_t)blockIdx.z * M * N : C;
        const float alphaOut = split ? 1.0f : alpha, betaOut = split ? 0.0f : beta;
        float* stage = reinterpret_cast<float*>(slots) + c * (64 * EP_LD);
#pragma unroll
        for (int hf = 0; hf < BN / PART_COLS; ++hf)
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int j = 0; j < PART_COLS / 8; ++j) {
                    const int i = hf * PART + 4 * j + 2 * h;
                    *reinterpret_cast<float2*>(&stage[(16 * w + g + 8 * h) * EP_LD + hf * PART_COLS + 8 * j + 2 * t]) =
                        make_float2(d[i], d[i + 1]);
                }
        asm volatile("bar.sync %0, 128;\n" ::"r"(2 + c) : "memory");
        constexpr int Q = BN / 4;  // 16-byte pieces of a staged row
        if ((N & 3) == 0 && aligned16(out)) {  // rows on 16-byte boundaries: a piece is wholly inside N or outside
            // The loads of C for 8 pieces issued together before any of their stores (a store may alias a
            // later load as far as the compiler knows, so it would otherwise wait out each load in turn).
#pragma unroll 1
            for (int it0 = 0; it0 < 64 * Q / 128; it0 += 8) {
                float4 old[8];
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    const int idx = (it0 + j) * 128 + ti, row = row0 + idx / Q, col = col0 + 4 * (idx % Q);
                    old[j] = betaOut != 0.0f && row < M && col < N
                                 ? *reinterpret_cast<const float4*>(out + (size_t)row * N + col)
                                 : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                }
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    const int idx = (it0 + j) * 128 + ti, r = idx / Q, q = idx % Q;
                    const int row = row0 + r, col = col0 + 4 * q;
                    if (row < M && col < N) {
                        float4 v = *reinterpret_cast<const float4*>(&stage[r * EP_LD + 4 * q]);
                        const float4 u = __ldg(reinterpret_cast<const float4*>(colscale + col));  // B's scales undone
                        v.x *= u.x; v.y *= u.y; v.z *= u.z; v.w *= u.w;
                        v.x *= alphaOut; v.y *= alphaOut; v.z *= alphaOut; v.w *= alphaOut;
                        if (betaOut != 0.0f) {
                            v.x += betaOut * old[j].x; v.y += betaOut * old[j].y; v.z += betaOut * old[j].z; v.w += betaOut * old[j].w;
                        }
                        *reinterpret_cast<float4*>(out + (size_t)row * N + col) = v;
                    }
                }
            }
        } else {
            // C's rows off 16 bytes: one column a lane, the warpgroup's 128 threads on 128 consecutive floats
            // of a row (a staged row in BN / 128 pieces), the loads of C for 8 pieces issued together.
            constexpr int PIECES = BN / 128;
#pragma unroll 1
            for (int p0 = 0; p0 < 64 * PIECES; p0 += 8) {
                float old[8];
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    const int p = p0 + j, row = row0 + p / PIECES, col = col0 + 128 * (p % PIECES) + ti;
                    old[j] = betaOut != 0.0f && row < M && col < N ? out[(size_t)row * N + col] : 0.0f;
                }
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    const int p = p0 + j, r = p / PIECES, q = 128 * (p % PIECES) + ti;
                    const int row = row0 + r, col = col0 + q;
                    if (row < M && col < N) {
                        float x = stage[r * EP_LD + q] * __ldg(colscale + col) * alphaOut;  // the float4 form's arithmetic
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
