// Stage 04 - 1-D register tiling: each thread computes TM results down one column of a BM x BN
// tile (BM = BN = 64, BK = 8, TM = 8, so 512 threads).
//
// Inner loop: for each k of the tile, one Bs value is loaded into a register and reused for TM
// products with TM values of As. Shared-memory loads per result drop from 2 per FMA to
// (1 + TM) / TM = 1.125 per FMA; global loads per result are K/BN + K/BM = K/32.
#include "common.cuh"

#ifndef BM
#define BM 64
#endif
#ifndef BN
#define BN 64
#endif
#ifndef BK
#define BK 8
#endif
#ifndef TM
#define TM 8
#endif
constexpr int THREADS = BM * BN / TM;
static_assert(BM % TM == 0, "BM must be a multiple of TM");
static_assert(BM * BK == THREADS && BK * BN == THREADS,
              "each thread loads exactly one element of As and one of Bs per K-step");

extern "C" __global__ void __launch_bounds__(THREADS)
sgemm_1d_blocktiling(int M, int N, int K, float alpha, const float* __restrict__ A,
                     const float* __restrict__ B, float beta, float* __restrict__ C) {
    __shared__ float As[BM * BK];
    __shared__ float Bs[BK * BN];

    // Compute mapping: a warp spans 32 consecutive columns; each thread owns rows
    // threadRow*TM .. threadRow*TM + TM-1 of its column.
    const int threadCol = threadIdx.x % BN;
    const int threadRow = threadIdx.x / BN;
    // Load mappings: one element of each tile per thread, consecutive threads on consecutive
    // addresses of the same row (coalesced).
    const int aRow = threadIdx.x / BK, aCol = threadIdx.x % BK;
    const int bRow = threadIdx.x / BN, bCol = threadIdx.x % BN;

    A += (size_t)blockIdx.y * BM * K;
    B += (size_t)blockIdx.x * BN;
    C += (size_t)blockIdx.y * BM * N + (size_t)blockIdx.x * BN;

    float acc[TM] = {0.0f};
    for (int k0 = 0; k0 < K; k0 += BK) {
        As[aRow * BK + aCol] = A[(size_t)aRow * K + aCol];
        Bs[bRow * BN + bCol] = B[(size_t)bRow * N + bCol];
        __syncthreads();
        A += BK;
        B += (size_t)BK * N;
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            const float b = Bs[k * BN + threadCol];  // one shared load, reused TM times
#pragma unroll
            for (int r = 0; r < TM; ++r)
                acc[r] += As[(threadRow * TM + r) * BK + k] * b;
        }
        __syncthreads();
    }
#pragma unroll
    for (int r = 0; r < TM; ++r) {
        float* c = &C[(size_t)(threadRow * TM + r) * N + threadCol];
        *c = epilogue(alpha, acc[r], beta, c);
    }
}
