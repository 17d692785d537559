/* Stage 00 - the CPU baseline: the textbook i-j-k triple loop, one core, on the host.
 *
 * hostmult0 accumulates straight into C[i][j] in memory. A, B and C are plain pointers, so C may
 * alias A or B and the compiler has to store C[i][j] on every k step (the next load of A or B might
 * read it): each FMA costs a load of A, a load of B and a store of C.
 * hostmult1 promises no aliasing (restrict) and sums into a local variable that lives in a
 * register; C is read (only when beta != 0) and written once per result. Both still walk B down a
 * column, N floats apart, so for large N every k step touches a new cache line of B: 2K loads and
 * 2K flops per result, an arithmetic intensity of 1/4 flop per byte at best.
 */
#include <stddef.h>

void hostmult0(int M, int N, int K, float alpha, const float* A, const float* B, float beta, float* C) {
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) {
            float* c = &C[(size_t)i * N + j];
            *c = beta == 0.0f ? 0.0f : beta * *c;  /* beta == 0: C is not read (may hold NaN) */
            for (int k = 0; k < K; ++k)
                *c += alpha * A[(size_t)i * K + k] * B[(size_t)k * N + j];
        }
}

void hostmult1(int M, int N, int K, float alpha, const float* restrict A, const float* restrict B, float beta,
               float* restrict C) {
    for (int i = 0; i < M; ++i) {
        const float* a = &A[(size_t)i * K];  /* row i of A: contiguous */
        for (int j = 0; j < N; ++j) {
            float acc = 0.0f;
            for (int k = 0; k < K; ++k)
                acc += a[k] * B[(size_t)k * N + j];  /* B: N floats apart */
            float* c = &C[(size_t)i * N + j];
            *c = beta == 0.0f ? alpha * acc : alpha * acc + beta * *c;
        }
    }
}
