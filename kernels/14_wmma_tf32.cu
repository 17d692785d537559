// Stage 14 (TF32) - the first tensor-core stage: WMMA on TF32 fragments, fed by a cp.async ring.
// Precision class tf32: A and B are rounded to TF32 (10-bit mantissa, relative error about 2^-11
// per operand) before each tensor-core product; the accumulation stays FP32. Its tolerance and its
// baseline (cuBLAS in TF32 mode, `cublas_tf32`) are TF32's, not strict FP32's.
//
// Tiling. A block of 32 * (BM / WTM) * (BN / WTN) threads (THREADS) computes a BM x BN tile of C;
// each warp a WTM x WTN part of it, as (WTM / 16) x (WTN / 16) accumulator fragments of 16 x 16
// (defaults: 128 x 128 x 16 block tiles, 8 warps of 64 x 32, eight 16 x 16 accumulators per warp).
// Per k-step of 8 a warp loads one 16 x 8 A fragment per fragment row and one 8 x 16 B fragment per
// fragment column from shared memory, rounds them to TF32 and issues one 16 x 16 x 8 product per pair.
//
// Why it is built this way:
// - A STAGES-deep ring of shared-memory tiles filled by cp.async (global -> shared with no staging
//   registers): while the warps multiply tile t, the copies of tiles t+1 .. t+STAGES-1 are in
//   flight, and one barrier per K-step separates "tile t has landed" from "tile t-1 may be
//   overwritten". A first single-buffered version ran 44.7 TFLOP/s at 4096^3 (0.87x strict cuBLAS),
//   its warps waiting on global loads with nothing else resident.
// - MINBLOCKS = 2 caps the registers at 128 per thread (146 without), so that two blocks (16 warps)
//   share an SM and hide each other's barriers. At 128 registers BK = 32 spilled (the unrolled k-steps
//   keep more fragments live); BK = 16 with 4 slots does not, and its ring takes 75 KB of shared
//   memory per block (dynamic, opted in above 48 KB).
// - Rows padded by 4 floats (AS_LD = BK + 4, BS_LD = BN + 4): fragment rows start 4 banks apart,
//   and every fragment origin stays 32-byte aligned, as WMMA's loads require.
// Epilogue: C is loaded as an accumulator fragment (the same element layout as the product's), so
// alpha * AB + beta * C is elementwise on registers; C is not read when beta = 0.
// Tile multiples only (M % BM, N % BN, K % BK == 0), which also keeps every 16-byte copy aligned.

#include <mma.h>

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

using namespace nvcuda;

constexpr int NTHREADS = 32 * (BM / WTM) * (BN / WTN);  // one warp per warp tile
#ifdef THREADS
static_assert(THREADS == NTHREADS, "THREADS (the launch's block size) must be 32 * (BM / WTM) * (BN / WTN)");
#endif
constexpr int FRAG_M = WTM / 16, FRAG_N = WTN / 16;  // fragments per warp
constexpr int AS_LD = BK + 4;                        // As[m][k], padded rows
constexpr int BS_LD = BN + 4;                        // Bs[k][n], padded rows
constexpr int A_STAGE = BM * AS_LD, B_STAGE = BK * BS_LD;  // floats per ring slot

static_assert(BM % WTM == 0 && BN % WTN == 0, "the block tile must be a whole number of warp tiles");
static_assert(WTM % 16 == 0 && WTN % 16 == 0, "warp tiles are made of 16 x 16 fragments");
static_assert(BK % 8 == 0, "BK must be a multiple of the fragments' k = 8");
static_assert((BM * BK) % (4 * NTHREADS) == 0 && (BK * BN) % (4 * NTHREADS) == 0,
              "the A and B tiles must be whole float4 per thread");
static_assert(STAGES >= 2, "the ring needs at least two slots");
static_assert((A_STAGE * 4) % 32 == 0 && (B_STAGE * 4) % 32 == 0, "ring slots must keep fragments 32-byte aligned");

extern "C" __global__ void __launch_bounds__(NTHREADS, MINBLOCKS)
sgemm_wmma_tf32(int M, int N, int K, float alpha, const float* __restrict__ A,
                const float* __restrict__ B, float beta, float* __restrict__ C) {
    extern __shared__ __align__(128) float smem[];  // STAGES slots of As, then STAGES slots of Bs
    float* As = smem;
    float* Bs = smem + STAGES * A_STAGE;

    const int tid = threadIdx.x, warp = tid / 32;
    const int warpRow = warp / (BN / WTN), warpCol = warp % (BN / WTN);
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const int numTiles = K / BK;

    // Copy of K-tile t into ring slot s: thread tid moves float4 number tid, tid + THREADS, ... of
    // each tile (both row-major, so a warp reads whole rows: 128 contiguous bytes of A, 512 of B).
    // Float4 number i of A's tile is row i / (BK/4), column 4 * (i % (BK/4)); THREADS is a multiple
    // of BK/4, so the thread's column is fixed and its rows step by A_STEP (likewise for B): one base
    // pointer per operand, advanced by constants, keeps the copy's registers few.
    constexpr int A_STEP = NTHREADS / (BK / 4), B_STEP = NTHREADS / (BN / 4);
    static_assert(NTHREADS % (BK / 4) == 0 && NTHREADS % (BN / 4) == 0, "a thread keeps its column");
    const float* aG = A + (size_t)(row0 + tid / (BK / 4)) * K + (tid % (BK / 4)) * 4;
    const float* bG = B + (size_t)(tid / (BN / 4)) * N + col0 + (tid % (BN / 4)) * 4;
    const int aS = (tid / (BK / 4)) * AS_LD + (tid % (BK / 4)) * 4;
    const int bS = (tid / (BN / 4)) * BS_LD + (tid % (BN / 4)) * 4;
    auto issue = [&](int t, int s) {
#pragma unroll
        for (int j = 0; j < BM / A_STEP; ++j)
            cp_async_16(smem_u32(&As[s * A_STAGE + aS + j * A_STEP * AS_LD]), aG + (size_t)j * A_STEP * K + t * BK);
#pragma unroll
        for (int j = 0; j < BK / B_STEP; ++j)
            cp_async_16(smem_u32(&Bs[s * B_STAGE + bS + j * B_STEP * BS_LD]), bG + ((size_t)t * BK + j * B_STEP) * N);
    };

    wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc[FRAG_M][FRAG_N];
#pragma unroll
    for (int i = 0; i < FRAG_M; ++i)
#pragma unroll
        for (int j = 0; j < FRAG_N; ++j)
            wmma::fill_fragment(acc[i][j], 0.0f);

    // Prologue: tiles 0 .. STAGES-2 in flight. Every thread commits one group per tile slot, even an
    // empty one, so that "at most STAGES-2 groups pending" always means "tile t has landed".
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < numTiles)
            issue(s, s);
        cp_async_commit();
    }
    for (int t = 0; t < numTiles; ++t) {
        cp_async_wait<STAGES - 2>();  // this thread's copies of tile t have landed ...
        __syncthreads();              // ... and everyone's; and nobody still reads tile t-1's slot
        const int next = t + STAGES - 1;
        if (next < numTiles)
            issue(next, next % STAGES);  // into the slot tile t-1 used
        cp_async_commit();
        const float* as = &As[(t % STAGES) * A_STAGE + warpRow * WTM * AS_LD];
        const float* bs = &Bs[(t % STAGES) * B_STAGE + warpCol * WTN];
#pragma unroll
        for (int kk = 0; kk < BK; kk += 8) {
            // The B fragments of this k-step stay in registers; A fragments are loaded one at a time
            // (4 registers live instead of 16: the kernel fits 128 registers without spilling).
            wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> b[FRAG_N];
#pragma unroll
            for (int j = 0; j < FRAG_N; ++j) {
                wmma::load_matrix_sync(b[j], bs + kk * BS_LD + j * 16, BS_LD);
#pragma unroll
                for (int e = 0; e < b[j].num_elements; ++e)
                    b[j].x[e] = wmma::__float_to_tf32(b[j].x[e]);
            }
#pragma unroll
            for (int i = 0; i < FRAG_M; ++i) {
                wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> a;
                wmma::load_matrix_sync(a, as + i * 16 * AS_LD + kk, AS_LD);
#pragma unroll
                for (int e = 0; e < a.num_elements; ++e)
                    a.x[e] = wmma::__float_to_tf32(a.x[e]);
#pragma unroll
                for (int j = 0; j < FRAG_N; ++j)
                    wmma::mma_sync(acc[i][j], a, b[j], acc[i][j]);
            }
        }
    }
    cp_async_wait<0>();  // no copy may still target shared memory when the block exits

#pragma unroll
    for (int i = 0; i < FRAG_M; ++i)
#pragma unroll
        for (int j = 0; j < FRAG_N; ++j) {
            float* c = C + (size_t)(row0 + warpRow * WTM + i * 16) * N + col0 + warpCol * WTN + j * 16;
            if (beta != 0.0f) {
                wmma::fragment<wmma::accumulator, 16, 16, 8, float> old;
                wmma::load_matrix_sync(old, c, N, wmma::mem_row_major);
#pragma unroll
                for (int e = 0; e < old.num_elements; ++e)
                    acc[i][j].x[e] = alpha * acc[i][j].x[e] + beta * old.x[e];
            } else {
#pragma unroll
                for (int e = 0; e < acc[i][j].num_elements; ++e)
                    acc[i][j].x[e] *= alpha;
            }
            wmma::store_matrix_sync(c, acc[i][j], N, wmma::mem_row_major);
        }
}
