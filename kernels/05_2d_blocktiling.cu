// Stage 05 - 2-D register tiling: each thread computes a TM x TN micro-tile of a BM x BN tile of C
// (BM = BN = 128, BK = 8, TM = TN = 8, so 256 threads and 64 results per thread).
//
// Inner loop: for each k of the tile, a thread loads the TM values of As in its rows and the TN
// values of Bs in its columns into registers and forms their outer product: TM*TN FMAs for TM + TN
// shared loads, 0.25 per FMA at 8 x 8 (stage 04: 1.125). Global loads per result fall to
// K/BN + K/BM = K/64, as each tile of A is reused by BN columns and each tile of B by BM rows: the
// block moves (BM + BN)*BK floats per K-step for 2*BM*BN*BK flops, an arithmetic intensity of
// 2*BM*BN / (4*(BM + BN)) = 32 flops per byte of global traffic (stage 04: 8).
#include "common.cuh"

#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef BK
#define BK 8
#endif
#ifndef TM
#define TM 8
#endif
#ifndef TN
#define TN 8
#endif
static_assert(BM % TM == 0, "BM must be a multiple of TM");
static_assert(BN % TN == 0, "BN must be a multiple of TN");
constexpr int THREADS = (BM / TM) * (BN / TN);
static_assert(THREADS <= 1024, "(BM/TM) * (BN/TN) must not exceed 1024 threads");
// Tile copies: thread t loads elements t, t + THREADS, ... of the tile in row-major order, so
// consecutive threads read consecutive addresses along a row. When the tile holds fewer elements
// than (a multiple of) THREADS, the last pass is guarded.
constexpr int A_TILE = BM * BK, B_TILE = BK * BN;
constexpr int A_PASSES = (A_TILE + THREADS - 1) / THREADS;
constexpr int B_PASSES = (B_TILE + THREADS - 1) / THREADS;

extern "C" __global__ void __launch_bounds__(THREADS)
sgemm_2d_blocktiling(int M, int N, int K, float alpha, const float* __restrict__ A,
                     const float* __restrict__ B, float beta, float* __restrict__ C) {
    __shared__ float As[BM * BK];  // BM x BK, row-major (as in A)
    __shared__ float Bs[BK * BN];  // BK x BN, row-major (as in B)

    // Compute mapping: BN/TN threads across a row of micro-tiles, tx fastest; thread (threadRow,
    // threadCol) owns rows threadRow*TM .. +TM-1 and columns threadCol*TN .. +TN-1 of the tile.
    const int threadCol = threadIdx.x % (BN / TN);
    const int threadRow = threadIdx.x / (BN / TN);

    A += (size_t)blockIdx.y * BM * K;
    B += (size_t)blockIdx.x * BN;
    C += (size_t)blockIdx.y * BM * N + (size_t)blockIdx.x * BN;

    float acc[TM][TN] = {};
    float regM[TM], regN[TN];
    for (int k0 = 0; k0 < K; k0 += BK) {
        // Element i of a tile sits at (i / width, i % width); widths are powers of two in practice,
        // so that is a shift and a mask.
#pragma unroll
        for (int p = 0; p < A_PASSES; ++p) {
            const int i = threadIdx.x + p * THREADS;
            if (A_TILE % THREADS == 0 || i < A_TILE)
                As[i] = A[(size_t)(i / BK) * K + i % BK];
        }
#pragma unroll
        for (int p = 0; p < B_PASSES; ++p) {
            const int i = threadIdx.x + p * THREADS;
            if (B_TILE % THREADS == 0 || i < B_TILE)
                Bs[i] = B[(size_t)(i / BN) * N + i % BN];
        }
        __syncthreads();
        A += BK;
        B += (size_t)BK * N;

#pragma unroll
        for (int k = 0; k < BK; ++k) {
            // TM + TN shared loads per k feed TM*TN FMAs from registers.
#pragma unroll
            for (int m = 0; m < TM; ++m)
                regM[m] = As[(threadRow * TM + m) * BK + k];
#pragma unroll
            for (int n = 0; n < TN; ++n)
                regN[n] = Bs[k * BN + threadCol * TN + n];
#pragma unroll
            for (int m = 0; m < TM; ++m)
#pragma unroll
                for (int n = 0; n < TN; ++n)
                    acc[m][n] += regM[m] * regN[n];
        }
        __syncthreads();
    }
#pragma unroll
    for (int m = 0; m < TM; ++m)
#pragma unroll
        for (int n = 0; n < TN; ++n) {
            float* c = &C[(size_t)(threadRow * TM + m) * N + threadCol * TN + n];
            *c = epilogue(alpha, acc[m][n], beta, c);
        }
}
