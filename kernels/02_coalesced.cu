// Stage 02 - global-memory coalescing: the same loop as stage 01 with the thread-to-element map
// transposed, row = t / N and col = t % N.
//
// Now a warp holds 32 consecutive COLUMNS of one row: A[row][i] is one address for the warp
// (broadcast), B[i][col..col+31] is one 128-byte line, and the stores of C are contiguous. The
// number of loads per result is unchanged (2K) but each warp request now moves 4-byte words that
// are all used, instead of 32 separate sectors.
#include "common.cuh"

#ifndef BLOCK
#define BLOCK 256
#endif

extern "C" __global__ void __launch_bounds__(BLOCK)
sgemm_coalesced(int M, int N, int K, float alpha, const float* __restrict__ A,
                const float* __restrict__ B, float beta, float* __restrict__ C) {
    const long long t = (long long)blockIdx.x * BLOCK + threadIdx.x;
    if (t >= (long long)M * N) return;
    const int row = (int)(t / N);  // consecutive threads -> consecutive columns (coalesced)
    const int col = (int)(t % N);

    float acc = 0.0f;
    for (int i = 0; i < K; ++i)
        acc += A[(size_t)row * K + i] * B[(size_t)i * N + col];
    float* c = &C[(size_t)row * N + col];
    *c = epilogue(alpha, acc, beta, c);
}
