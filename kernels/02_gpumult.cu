// Stage 02 - first GPU port of the host loop: one thread per element of C, on a 2-D grid of
// BX x BY blocks (grid = ceil(N/BX) x ceil(M/BY)), bounds-checked, so any M, N, K.
//
// col = blockIdx.x*BX + tx and row = blockIdx.y*BY + ty with tx fastest: the threads of a warp hold
// consecutive columns of one row, so A[row][i] is a broadcast, B[i][col..] one contiguous line, and
// the stores of C are coalesced.
// gpumult0 keeps the host version's habit of accumulating in C itself: every k step is a global
// load and store of C on top of the loads of A and B (3 loads + 1 store per FMA).
// gpumult1 sums in a register: 2K global loads for 2K flops per result, C touched once.
#include "common.cuh"

// The harness passes every config parameter as a macro; a block_tile entry names the block tile
// BM x BN, which here is BY x BX, so those are accepted as the defaults of BY and BX.
#ifndef BX
#ifdef BN
#define BX BN
#else
#define BX 32
#endif
#endif
#ifndef BY
#ifdef BM
#define BY BM
#else
#define BY 8
#endif
#endif
constexpr int THREADS = BX * BY;
static_assert(BX > 0 && BY > 0 && THREADS <= 1024, "a block holds 1 to 1024 threads");
#ifdef BN
static_assert(BN == BX, "BN (columns of C per block) must equal BX");
#endif
#ifdef BM
static_assert(BM == BY, "BM (rows of C per block) must equal BY");
#endif

extern "C" __global__ void __launch_bounds__(THREADS)
sgemm_gpumult0(int M, int N, int K, float alpha, const float* __restrict__ A,
               const float* __restrict__ B, float beta, float* __restrict__ C) {
    // The block is launched 1-D with BX*BY threads; unfold it into (tx, ty), tx fastest.
    const int tx = threadIdx.x % BX;
    const int ty = threadIdx.x / BX;
    const int col = blockIdx.x * BX + tx;
    const int row = blockIdx.y * BY + ty;
    if (row >= M || col >= N) return;

    // volatile: C is __restrict__, so the compiler would otherwise keep *c in a register and this
    // would become gpumult1. Here every += really is a load and a store of global memory.
    volatile float* c = &C[(size_t)row * N + col];
    *c = beta == 0.0f ? 0.0f : beta * *c;  // beta == 0: C is not read (may hold NaN)
    for (int i = 0; i < K; ++i)
        *c = *c + alpha * A[(size_t)row * K + i] * B[(size_t)i * N + col];
}

extern "C" __global__ void __launch_bounds__(THREADS)
sgemm_gpumult1(int M, int N, int K, float alpha, const float* __restrict__ A,
               const float* __restrict__ B, float beta, float* __restrict__ C) {
    const int tx = threadIdx.x % BX;
    const int ty = threadIdx.x / BX;
    const int col = blockIdx.x * BX + tx;
    const int row = blockIdx.y * BY + ty;
    if (row >= M || col >= N) return;

    float acc = 0.0f;  // register accumulator: C is read (if beta != 0) and written once
    for (int i = 0; i < K; ++i)
        acc += A[(size_t)row * K + i] * B[(size_t)i * N + col];
    float* c = &C[(size_t)row * N + col];
    *c = epilogue(alpha, acc, beta, c);
}
