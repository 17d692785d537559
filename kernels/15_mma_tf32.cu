// Stage 15 (TF32) - tensor cores through mma.sync: the fragment layout in the kernel's own hands.
// Precision class tf32, like stage 14: A and B are rounded to TF32 (cvt.rna: to nearest, ties away),
// products accumulate in FP32; held to the TF32 tolerance, compared with cuBLAS in TF32 mode.
//
// Tiling as stage 14: a 128 x 128 block tile, 8 warps of 64 x 32, a 4-slot cp.async ring of 16-deep
// K-tiles, two blocks per SM. Each warp computes its 64 x 32 as 4 x 4 tiles of 16 x 8 with
// mma.sync.m16n8k8 (TF32 in, FP32 accumulate): 16 tiles x 4 accumulators = 64 registers.
//
// What changes against WMMA (stage 14):
// - Fragments are loaded with plain 32-bit shared loads (LDS) at the addresses the PTX fragment
//   layout names, instead of WMMA's generic loads. For lane = 4 * g + t (g = groupID 0..7,
//   t = thread in group 0..3) the m16n8k8 TF32 fragments are
//     A (16 x 8, row-major): a0 = A[g][t], a1 = A[g + 8][t], a2 = A[g][t + 4], a3 = A[g + 8][t + 4]
//     B (8 x 8, "col"):      b0 = B[t][g], b1 = B[t + 4][g]
//     C (16 x 8):            c0, c1 = C[g][2t], C[g][2t + 1];  c2, c3 = C[g + 8][2t], C[g + 8][2t + 1]
// - Bank-conflict-free by padding: a warp's A loads touch rows g (8 rows) x columns t (4 columns);
//   with a row pitch of BK + 4 floats (4 banks apart modulo 32 for BK = 16: pitch 20 -> rows at banks
//   0, 20, 8, 28, 16, 4, 24, 12) the 32 addresses fall in 32 different banks. B loads touch rows t x
//   columns g; a pitch of BN + 8 (8 banks apart) does the same.
// - Each element is rounded to TF32 once per fragment load (cvt.rna.tf32.f32, one instruction), not
//   with WMMA's compare-and-select sequence.
//
// TF32X3 = 1 builds stage 16, 3xTF32 (precision class 3xtf32, held to the strict-FP32 tolerance): each
// element is split into x = big + small, big = tf32(x), small = tf32(x - big) (together about 22 bits of
// significand), and each tile takes three products, small x big and big x small first so that they are
// not lost against the running sum, then big x big; small x small is below FP32's resolution.
//
// RN_ACC = 1 (with TF32X3): the tensor core adds into its FP32 accumulator with truncation (round toward
// zero), not round-to-nearest, so over K / 8 k-steps the truncations pile up in one direction (measured:
// relative error 1.1e-4 at K = 16384, growing linearly with K). With RN_ACC each k-step's three products
// are summed from zero in the tensor core and added to the running sum by an FP32 FADD, which rounds to
// nearest: the running sum never sees a truncated addition.
//
// Split-K (SPLIT_SLOTS > 0): an output of few tiles (256 x 256 is 4 of the 264 blocks two per SM would
// hold) leaves the GPU idle and sums K / 8 k-steps in one long running sum, whose roundings grow with
// K. The launch plan then gives the grid a third dimension of S K-slices (tiles * S <= SPLIT_SLOTS);
// block z runs K-tiles [z * ceil(T / S), ...) of the T, and the partial tiles meet in a fixed binary
// tree (split_tree in common.cuh): deterministic, log2(S) tile reads on the critical path, and a sum of
// K / (8 S) steps plus log2(S) levels instead of K / 8 steps.
//
// WIDE_RANGE = 1 (with TF32X3; the default): a B row of a K-tile whose values all lie below 2^-100 is
// scaled up by a power of two, and A's matching column down by the same power, before the split, so
// that B's small parts stay out of FP32's subnormal range (see the main loop).

#include "common.cuh"

#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef BK
#define BK 16
#endif
#ifndef WTM
#define WTM 64
#endif
#ifndef WTN
#define WTN 32
#endif
#ifndef STAGES
#define STAGES 4
#endif
#ifndef MINBLOCKS
#define MINBLOCKS 2
#endif
#ifndef TF32X3
#define TF32X3 0
#endif
#ifndef RN_ACC
#define RN_ACC 0
#endif
#ifndef WIDE_RANGE
#define WIDE_RANGE 1   // TF32X3: B rows below 2^-100 scaled up (and A's columns down) before the split
#endif
#ifndef SPLIT_SLOTS
#define SPLIT_SLOTS 0  // blocks the split-K workspace holds (launch plan: tiles * slices <= this); 0: no split
#endif

constexpr int NTHREADS = 32 * (BM / WTM) * (BN / WTN);  // one warp per warp tile
#ifdef THREADS
static_assert(THREADS == NTHREADS, "THREADS (the launch's block size) must be 32 * (BM / WTM) * (BN / WTN)");
#endif
constexpr int TM = WTM / 16, TN = WTN / 8;           // 16 x 8 mma tiles per warp
constexpr int AS_LD = BK + 4;                        // As[m][k]: rows 4 banks apart (mod 32)
constexpr int BS_LD = BN + 8;                        // Bs[k][n]: rows 8 banks apart (mod 32)
constexpr int A_STAGE = BM * AS_LD, B_STAGE = BK * BS_LD;  // floats per ring slot

static_assert(BM % WTM == 0 && BN % WTN == 0, "the block tile must be a whole number of warp tiles");
static_assert(WTM % 16 == 0 && WTN % 8 == 0, "warp tiles are made of 16 x 8 mma tiles");
static_assert(BK % 8 == 0, "BK must be a multiple of the mma's k = 8");
static_assert(AS_LD % 32 == 4 || AS_LD % 32 == 20 || AS_LD % 32 == 12 || AS_LD % 32 == 28,
              "A's pitch must put the 8 rows of a fragment load in 8 different groups of 4 banks");
static_assert(BS_LD % 32 == 8 || BS_LD % 32 == 24, "B's pitch must put the 4 rows of a fragment load 8 banks apart");
static_assert((BM * BK) % (4 * NTHREADS) == 0 && (BK * BN) % (4 * NTHREADS) == 0,
              "the A and B tiles must be whole float4 per thread");
static_assert(NTHREADS % (BK / 4) == 0 && NTHREADS % (BN / 4) == 0, "a thread keeps its copy column");
static_assert(STAGES >= 2, "the ring needs at least two slots");
static_assert(SPLIT_SLOTS >= 0, "SPLIT_SLOTS >= 0 (0: no split-K)");
static_assert(!(TF32X3 && WIDE_RANGE) || BN / 4 == 32, "TF32X3's wide-range scaling takes one warp per B row (BN = 128)");

#if SPLIT_SLOTS > 0
// Split-K scratch: one partial tile per block of a split launch, thread-major (split_tree), and one
// counter per tree node of each tile (S - 1 of a tile's S slots).
__device__ float4 splitPartials[(size_t)SPLIT_SLOTS * TM * TN * NTHREADS];
__device__ unsigned int splitArrivals[SPLIT_SLOTS];
#endif

// d += a * b for one 16 x 8 x 8 tile (TF32 inputs, FP32 accumulators).
__device__ __forceinline__ void mma_tf32(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

extern "C" __global__ void __launch_bounds__(NTHREADS, MINBLOCKS)
sgemm_mma_tf32(int M, int N, int K, float alpha, const float* __restrict__ A,
               const float* __restrict__ B, float beta, float* __restrict__ C) {
    extern __shared__ __align__(128) float smem[];  // STAGES slots of As, then STAGES slots of Bs
    float* As = smem;
    float* Bs = smem + STAGES * A_STAGE;

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int g = lane / 4, t = lane % 4;  // the fragment coordinates of this lane (see above)
    const int warpRow = warp / (BN / WTN), warpCol = warp % (BN / WTN);
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    // K-tiles of this block: all of them, or slice z of the S = gridDim.z slices.
    const int S = gridDim.z, z = blockIdx.z;
    const int perSlice = (K / BK + S - 1) / S, kBegin = z * perSlice;
    const int numTiles = max(0, min(K / BK, kBegin + perSlice) - kBegin);
#if SPLIT_SLOTS > 0
    if (S > 1 && gridDim.x * gridDim.y * S > SPLIT_SLOTS)
        __trap();  // the launch plan keeps tiles * slices within the workspace: never write past it
#endif

    // Copy maps of stage 14: float4 number tid + j * THREADS of each row-major tile; the thread's
    // column is fixed, its rows step by A_STEP (B_STEP).
    constexpr int A_STEP = NTHREADS / (BK / 4), B_STEP = NTHREADS / (BN / 4);
    const float* aG = A + (size_t)(row0 + tid / (BK / 4)) * K + (tid % (BK / 4)) * 4;
    const float* bG = B + (size_t)(tid / (BN / 4)) * N + col0 + (tid % (BN / 4)) * 4;
    const int aS = (tid / (BK / 4)) * AS_LD + (tid % (BK / 4)) * 4;
    const int bS = (tid / (BN / 4)) * BS_LD + (tid % (BN / 4)) * 4;
    auto issue = [&](int kt, int s) {  // the slice's K-tile kt into ring slot s
        kt += kBegin;
#pragma unroll
        for (int j = 0; j < BM / A_STEP; ++j)
            cp_async_16(smem_u32(&As[s * A_STAGE + aS + j * A_STEP * AS_LD]), aG + (size_t)j * A_STEP * K + kt * BK);
#pragma unroll
        for (int j = 0; j < BK / B_STEP; ++j)
            cp_async_16(smem_u32(&Bs[s * B_STAGE + bS + j * B_STEP * BS_LD]), bG + ((size_t)kt * BK + j * B_STEP) * N);
    };

    float acc[TM][TN][4] = {};
    // This lane's first fragment element inside a slot: A[warp's row + g][t], B[t][warp's column + g].
    const int aFrag = (warpRow * WTM + g) * AS_LD + t;
    const int bFrag = t * BS_LD + warpCol * WTN + g;

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {  // prologue: tiles 0 .. STAGES-2 in flight, one group each
        if (s < numTiles)
            issue(s, s);
        cp_async_commit();
    }
    for (int kt = 0; kt < numTiles; ++kt) {
        cp_async_wait<STAGES - 2>();  // tile kt has landed (this thread's copies) ...
#if TF32X3 && WIDE_RANGE
        // Wide-range inputs: the TF32 small part of a value below about 2^-115 is subnormal and keeps
        // only a few bits. Each thread looks at the B values it copied itself (visible to it after the
        // wait), and the barrier that publishes the tile also ORs what they found, so the common case
        // costs two shared loads and no extra barrier. Where a B row k of the tile has no value at or
        // above 2^-100 (rare: a block-wide branch), that row is scaled up by 2^shift and A's column k
        // down by the same power in shared memory: every product a * b is unchanged (powers of two), so
        // nothing downstream needs a correction. One warp holds each B row (BN / 4 = 32 copy lanes).
        {
            // a value whose small part would be subnormal; zeros (their parts are zero) do not count
            auto below = [](float v) { return v != 0.0f && fabsf(v) < 0x1p-100f; };
            float* bt = &Bs[(kt % STAGES) * B_STAGE];
            float4 own[BK / B_STEP];
            bool tiny = false;
#pragma unroll
            for (int j = 0; j < BK / B_STEP; ++j) {
                own[j] = load4(bt + bS + j * B_STEP * BS_LD);
                tiny |= below(own[j].x) || below(own[j].y) || below(own[j].z) || below(own[j].w);
            }
            if (__syncthreads_or(tiny)) {  // ... everyone's; and nobody still reads tile kt-1's slot
                float* at = &As[(kt % STAGES) * A_STAGE];
#pragma unroll
                for (int j = 0; j < BK / B_STEP; ++j) {
                    float mx = fmaxf(fmaxf(fabsf(own[j].x), fabsf(own[j].y)), fmaxf(fabsf(own[j].z), fabsf(own[j].w)));
#pragma unroll
                    for (int o = 1; o < 32; o *= 2)
                        mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, o));
                    const int shift = max(0, (127 - 100) - (__float_as_int(mx) >> 23));  // 0 unless max < 2^-100
                    if (shift) {  // warp-uniform
                        const float up = __int_as_float((127 + shift) << 23), down = __int_as_float((127 - shift) << 23);
                        store4(bt + bS + j * B_STEP * BS_LD,
                               make_float4(own[j].x * up, own[j].y * up, own[j].z * up, own[j].w * up));
                        const int k = tid / (BN / 4) + j * B_STEP;  // this warp's B row: A's column k
                        for (int m = lane; m < BM; m += 32)
                            at[m * AS_LD + k] *= down;
                    }
                }
                __syncthreads();  // the scaled tiles are in place before any fragment load
            }
        }
#else
        __syncthreads();              // ... everyone's; and nobody still reads tile kt-1's slot
#endif
        const int next = kt + STAGES - 1;
        if (next < numTiles)
            issue(next, next % STAGES);
        cp_async_commit();
        const float* as = &As[(kt % STAGES) * A_STAGE + aFrag];
        const float* bs = &Bs[(kt % STAGES) * B_STAGE + bFrag];
#pragma unroll
        for (int kk = 0; kk < BK; kk += 8) {
            unsigned b[TN][2], bSmall[TN][2];
#pragma unroll
            for (int j = 0; j < TN; ++j) {
                split(bs[kk * BS_LD + j * 8], b[j][0], bSmall[j][0]);
                split(bs[(kk + 4) * BS_LD + j * 8], b[j][1], bSmall[j][1]);
            }
#pragma unroll
            for (int i = 0; i < TM; ++i) {
                const float* ai = as + i * 16 * AS_LD + kk;
                unsigned a[4], aSmall[4];
                split(ai[0], a[0], aSmall[0]);
                split(ai[8 * AS_LD], a[1], aSmall[1]);
                split(ai[4], a[2], aSmall[2]);
                split(ai[8 * AS_LD + 4], a[3], aSmall[3]);
#pragma unroll
                for (int j = 0; j < TN; ++j) {
                    if (TF32X3 && RN_ACC) {  // this k-step's products from zero, then one rounded add each
                        float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                        mma_tf32(part, aSmall, b[j]);
                        mma_tf32(part, a, bSmall[j]);
                        mma_tf32(part, a, b[j]);
#pragma unroll
                        for (int e = 0; e < 4; ++e)
                            acc[i][j][e] += part[e];
                    } else {
                        if (TF32X3) {  // the small terms (unused, and removed by the compiler, when TF32X3 = 0)
                            mma_tf32(acc[i][j], aSmall, b[j]);
                            mma_tf32(acc[i][j], a, bSmall[j]);
                        }
                        mma_tf32(acc[i][j], a, b[j]);
                    }
                }
            }
        }
    }
    cp_async_wait<0>();  // no copy may still target shared memory when the block exits
#if SPLIT_SLOTS > 0
    if (S > 1) {  // the slices of this tile meet in the tree; only its root goes on to write C
        const int tile = blockIdx.y * gridDim.x + blockIdx.x;
        float4* slots = splitPartials + (size_t)tile * S * TM * TN * NTHREADS + tid;
        if (!split_tree<TM * TN * 4, NTHREADS>(reinterpret_cast<float(&)[TM * TN * 4]>(acc), slots,
                                                splitArrivals + tile * S, S, z))
            return;
    }
#endif

    // Epilogue: acc[i][j] holds C rows r and r + 8 (r = warp's row + 16 i + g), columns c, c + 1
    // (c = warp's column + 8 j + 2 t): two float2 per tile. C is read only when beta != 0.
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = row0 + warpRow * WTM + i * 16 + g + 8 * h;
                const int c = col0 + warpCol * WTN + j * 8 + 2 * t;
                float2* p = reinterpret_cast<float2*>(C + (size_t)r * N + c);
                float2 v = make_float2(alpha * acc[i][j][2 * h], alpha * acc[i][j][2 * h + 1]);
                if (beta != 0.0f) {
                    const float2 old = *p;
                    v.x += beta * old.x;
                    v.y += beta * old.y;
                }
                *p = v;
            }
}
