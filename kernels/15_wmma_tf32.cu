// Stage 15 (TF32, on trial) - the first tensor-core stage: WMMA on TF32 fragments.
// Precision class tf32: A and B are rounded to TF32 (10-bit mantissa, relative error about 2^-11
// per operand) before each tensor-core product; the accumulation stays FP32. Its tolerance and its
// baseline are TF32's, not strict FP32's.
//
// Tiling. A block of 32 * (BM / WTM) * (BN / WTN) threads (THREADS) computes a BM x BN tile of C;
// each warp a WTM x WTN part of it, as (WTM / 16) x (WTN / 16) accumulator fragments of 16 x 16.
// Per K-step of BK the block copies A's BM x BK and B's BK x BN tiles to shared memory with float4
// loads; each warp then walks k in steps of 8, loading one 16 x 8 A fragment per fragment row and
// one 8 x 16 B fragment per fragment column, rounding them to TF32, and issuing one 16 x 16 x 8
// product per fragment pair (mma_sync). Single-buffered: two barriers per K-step.
//
// Epilogue. C is loaded as an accumulator fragment (same element layout as the product's), so
// alpha * AB + beta * C is elementwise on the fragments' registers; C is not read when beta = 0.
// Tile multiples only (M % BM, N % BN, K % BK == 0): WMMA's loads and stores need 32-byte aligned
// fragment origins, which packed rows of length N and K multiples of the tile give.

#include <mma.h>

#include "common.cuh"

#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef BK
#define BK 32
#endif
#ifndef WTM
#define WTM 64
#endif
#ifndef WTN
#define WTN 32
#endif

using namespace nvcuda;

constexpr int NTHREADS = 32 * (BM / WTM) * (BN / WTN);  // one warp per warp tile
#ifdef THREADS
static_assert(THREADS == NTHREADS, "THREADS (the launch's block size) must be 32 * (BM / WTM) * (BN / WTN)");
#endif
constexpr int FRAG_M = WTM / 16, FRAG_N = WTN / 16;  // fragments per warp
constexpr int AS_LD = BK + 4;                        // padded rows: fewer bank conflicts; a multiple of 4
constexpr int BS_LD = BN + 4;

static_assert(BM % WTM == 0 && BN % WTN == 0, "the block tile must be a whole number of warp tiles");
static_assert(WTM % 16 == 0 && WTN % 16 == 0, "warp tiles are made of 16 x 16 fragments");
static_assert(BK % 8 == 0, "BK must be a multiple of the fragments' k = 8");
static_assert((BM * BK) % (4 * NTHREADS) == 0 && (BK * BN) % (4 * NTHREADS) == 0,
              "the A and B tiles must be whole float4 per thread");
static_assert((BM * AS_LD + BK * BS_LD) * 4 <= 48 * 1024, "static shared memory is limited to 48 KB");

extern "C" __global__ void __launch_bounds__(NTHREADS)
sgemm_wmma_tf32(int M, int N, int K, float alpha, const float* __restrict__ A,
                const float* __restrict__ B, float beta, float* __restrict__ C) {
    __shared__ __align__(32) float As[BM * AS_LD];  // [m][k]
    __shared__ __align__(32) float Bs[BK * BS_LD];  // [k][n]

    const int tid = threadIdx.x, warp = tid / 32;
    const int warpRow = warp / (BN / WTN), warpCol = warp % (BN / WTN);
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;

    wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc[FRAG_M][FRAG_N];
#pragma unroll
    for (int i = 0; i < FRAG_M; ++i)
#pragma unroll
        for (int j = 0; j < FRAG_N; ++j)
            wmma::fill_fragment(acc[i][j], 0.0f);

    for (int k0 = 0; k0 < K; k0 += BK) {
        // Copy: thread t moves float4 number t, t + THREADS, ... of each tile (row-major in both).
#pragma unroll
        for (int i = tid; i < BM * BK / 4; i += NTHREADS) {
            const int r = i / (BK / 4), c = (i % (BK / 4)) * 4;
            const float4 v = __ldg(reinterpret_cast<const float4*>(A + (size_t)(row0 + r) * K + k0 + c));
            *reinterpret_cast<float4*>(&As[r * AS_LD + c]) = v;
        }
#pragma unroll
        for (int i = tid; i < BK * BN / 4; i += NTHREADS) {
            const int r = i / (BN / 4), c = (i % (BN / 4)) * 4;
            const float4 v = __ldg(reinterpret_cast<const float4*>(B + (size_t)(k0 + r) * N + col0 + c));
            *reinterpret_cast<float4*>(&Bs[r * BS_LD + c]) = v;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; kk += 8) {
            wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> a[FRAG_M];
            wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> b[FRAG_N];
#pragma unroll
            for (int i = 0; i < FRAG_M; ++i) {
                wmma::load_matrix_sync(a[i], &As[(warpRow * WTM + i * 16) * AS_LD + kk], AS_LD);
#pragma unroll
                for (int e = 0; e < a[i].num_elements; ++e)
                    a[i].x[e] = wmma::__float_to_tf32(a[i].x[e]);
            }
#pragma unroll
            for (int j = 0; j < FRAG_N; ++j) {
                wmma::load_matrix_sync(b[j], &Bs[kk * BS_LD + warpCol * WTN + j * 16], BS_LD);
#pragma unroll
                for (int e = 0; e < b[j].num_elements; ++e)
                    b[j].x[e] = wmma::__float_to_tf32(b[j].x[e]);
            }
#pragma unroll
            for (int i = 0; i < FRAG_M; ++i)
#pragma unroll
                for (int j = 0; j < FRAG_N; ++j)
                    wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
        __syncthreads();  // everyone is done with this tile before the next copy overwrites it
    }

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
