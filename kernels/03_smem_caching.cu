// Stage 03 - shared-memory caching: a block computes one BM x BN tile of C (BM = BN = BK = 32,
// 1024 threads, one result per thread).
//
// Each K-step, the block copies a BM x BK tile of A and a BK x BN tile of B into shared memory
// (one element of each per thread, coalesced), synchronises, and every thread reads its row of
// As and its column of Bs from shared memory. Global loads per result fall from 2K to
// K/BN + K/BM = K/16; shared-memory loads stay at 2K per result, which now limits the kernel.
// UNROLL (default 1) unrolls the BK-long inner product fully; UNROLL=0 keeps it a loop, to show
// what the loop counter and branch cost next to one FMA and two shared loads per iteration.
#include "common.cuh"

#ifndef BM
#define BM 32
#endif
#ifndef BN
#define BN BM
#endif
#ifndef BK
#define BK BM
#endif
#ifndef UNROLL
#define UNROLL 1
#endif
static_assert(BM == BN && BN == BK, "one element of A and of B per thread needs BM == BN == BK");
static_assert(UNROLL == 0 || UNROLL == 1, "UNROLL is 1 (unroll the inner loop fully) or 0 (keep it a loop)");
constexpr int THREADS = BM * BN;

extern "C" __global__ void __launch_bounds__(THREADS)
sgemm_smem_caching(int M, int N, int K, float alpha, const float* __restrict__ A,
                   const float* __restrict__ B, float beta, float* __restrict__ C) {
    __shared__ float As[BM * BK];
    __shared__ float Bs[BK * BN];

    // threadIdx.x -> (ty, tx) with tx fastest, so a warp covers 32 consecutive columns.
    const int tx = threadIdx.x % BN;
    const int ty = threadIdx.x / BN;
    const int row = blockIdx.y * BM + ty;
    const int col = blockIdx.x * BN + tx;

    // Move the three pointers to this block's tile; they then advance by BK along K.
    A += (size_t)blockIdx.y * BM * K;
    B += (size_t)blockIdx.x * BN;

    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += BK) {
        As[ty * BK + tx] = A[(size_t)ty * K + tx];   // tx doubles as the k index of A's tile
        Bs[ty * BN + tx] = B[(size_t)ty * N + tx];   // ty doubles as the k index of B's tile
        __syncthreads();
        A += BK;
        B += (size_t)BK * N;
#if UNROLL
#pragma unroll
#else
#pragma unroll 1
#endif
        for (int i = 0; i < BK; ++i)
            acc += As[ty * BK + i] * Bs[i * BN + tx];  // As: broadcast; Bs: consecutive banks
        __syncthreads();  // the next copy must not overwrite tiles still being read
    }
    float* c = &C[(size_t)row * N + col];
    *c = epilogue(alpha, acc, beta, c);
}
