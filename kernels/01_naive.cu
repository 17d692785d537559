// Stage 01 - naive: one thread per element of C, on a 1-D grid.
//
// Thread t computes C[row][col] with row = t % M and col = t / M, so the 32 threads of a warp hold
// 32 consecutive ROWS of one column. Their A reads (A[row][i]) are K floats apart and their C
// accesses N floats apart: every warp load of A and every store of C touches 32 separate 32-byte
// sectors. B[i][col] is one address for the whole warp (a broadcast). Each result costs 2K global
// loads and performs 2K flops: arithmetic intensity 1/4 flop per byte, even before the poor
// coalescing is counted.
#include "common.cuh"

#ifndef BLOCK
#define BLOCK 256
#endif

extern "C" __global__ void __launch_bounds__(BLOCK)
sgemm_naive(int M, int N, int K, float alpha, const float* __restrict__ A,
            const float* __restrict__ B, float beta, float* __restrict__ C) {
    const long long t = (long long)blockIdx.x * BLOCK + threadIdx.x;
    if (t >= (long long)M * N) return;
    const int row = (int)(t % M);  // consecutive threads -> consecutive rows (uncoalesced)
    const int col = (int)(t / M);

    float acc = 0.0f;
    for (int i = 0; i < K; ++i)
        acc += A[(size_t)row * K + i] * B[(size_t)i * N + col];
    float* c = &C[(size_t)row * N + col];
    *c = epilogue(alpha, acc, beta, c);
}
