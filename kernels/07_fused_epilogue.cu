// Stage 07 - general shapes and a fused epilogue: D = act(alpha * A @ B + beta * C + bias) for any
// M, N, K >= 1 and any leading dimensions (BM = BN = 128, BK = 8, THR_M = THR_N = 8, 256 threads).
//
// Main loop: the 2-D register tiling of stages 05/06 with a two-stage shared-memory pipeline. While
// the block multiplies the K-tile in one stage, each thread fetches its share of the next K-tile
// into registers (loads issued before the math, so their latency hides behind it) and writes it to
// the other stage afterwards: one __syncthreads per K-step instead of two. Global loads per
// result stay K/BN + K/BM = K/64; shared loads stay THR_M/4 + THR_N/4 LDS.128 per THR_M*THR_N FMAs.
//
// Generality: elements of A and B outside the matrix (row >= M, col >= N, k >= K) are loaded as 0,
// so the inner product needs no branches and a partial last K-tile adds nothing; only the stores
// are guarded. Global loads are scalar (lda, ldb, ldc, ldd may be odd, so no 16-byte alignment can
// be assumed); shared memory, whose layout the kernel owns, is still read as float4.
//
// Epilogue: bias (may be nullptr) is added per column and ACT picks the activation at compile time
// (0 none, 1 ReLU, 2 GELU, tanh form). alpha scales the product only, not beta * C nor bias. With
// beta == 0 C is not read (nullptr or NaN are fine); C and D may be the same matrix, as every
// element of C is read and then written by the one thread that owns it.
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
#ifndef THR_M
#define THR_M 8
#endif
#ifndef THR_N
#define THR_N 8
#endif
#ifndef THREADS
#define THREADS 256
#endif
#ifndef ACT
#define ACT 0
#endif
static_assert(THR_M % 4 == 0 && THR_N % 4 == 0, "THR_M, THR_N must be multiples of 4 (float4 fragments)");
static_assert(BM % THR_M == 0 && BN % THR_N == 0, "BM must be a multiple of THR_M and BN of THR_N");
static_assert(THREADS == (BM / THR_M) * (BN / THR_N), "THREADS must be (BM/THR_M) * (BN/THR_N)");
static_assert(THREADS <= 1024, "(BM/THR_M) * (BN/THR_N) must not exceed 1024 threads");
static_assert(ACT >= 0 && ACT <= 2, "ACT is 0 (none), 1 (ReLU) or 2 (GELU, tanh approximation)");

// As is stored transposed (BK x BM) so a thread's THR_M values of A for one k are contiguous. The
// copy in writes it down columns: lanes with consecutive k land BM + A_PAD floats apart, and a pad
// of 4 puts them 4 banks apart (conflict-free for BK = 8) while keeping rows 16-byte aligned.
constexpr int A_PAD = 4;
constexpr int AS_LD = BM + A_PAD;
// Tile copies: thread t loads elements t, t + THREADS, ... of a tile in row-major order
// (consecutive threads on consecutive addresses of a row of A or B); a last, partial pass is guarded.
constexpr int A_TILE = BM * BK, B_TILE = BK * BN;
constexpr int A_PASSES = (A_TILE + THREADS - 1) / THREADS;
constexpr int B_PASSES = (B_TILE + THREADS - 1) / THREADS;
// A thread's micro-tile is THR_M/4 x THR_N/4 blocks of 4 x 4, spaced ROW_STEP rows and COL_STEP
// columns apart, rather than one contiguous THR_M x THR_N block. Then the 8 threads of a
// quarter-warp read 8 neighbouring float4 of a row of Bs (128 contiguous bytes, one shared-memory
// wavefront) instead of 8 float4 spread over 256 bytes (a 2-way bank conflict at THR_N = 8). Rows
// are spaced the same way for symmetry; with BN/THR_N >= 8 a quarter-warp shares its rows, so As
// reads are broadcasts either way.
constexpr int ROW_STEP = (BM / THR_M) * 4, COL_STEP = (BN / THR_N) * 4;

extern "C" __global__ void __launch_bounds__(THREADS)
sgemm_fused_epilogue(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
                     const float* __restrict__ B, int ldb, float beta, const float* C, int ldc,
                     const float* __restrict__ bias, float* D, int ldd) {
    __shared__ __align__(16) float As[2][BK][AS_LD];  // two stages of A's tile, transposed
    __shared__ __align__(16) float Bs[2][BK][BN];     // two stages of B's tile, row-major

    // Compute mapping: BN/THR_N threads across, tx fastest. Thread (threadRow, threadCol) owns the
    // rows threadRow*4 + i + g*ROW_STEP and columns threadCol*4 + j + h*COL_STEP of the tile
    // (i, j < 4; g < THR_M/4, h < THR_N/4).
    const int threadCol = threadIdx.x % (BN / THR_N);
    const int threadRow = threadIdx.x / (BN / THR_N);
    const int bm = blockIdx.y * BM, bn = blockIdx.x * BN;  // tile origin in D

    // Both pointers are in bounds (bm < M, bn < N); elements outside the matrices are never
    // addressed, as each load's index is only evaluated when its bounds check passes.
    const float* Ablk = A + (size_t)bm * lda;  // row bm of A
    const float* Bblk = B + bn;                // column bn of B

    float aReg[A_PASSES], bReg[B_PASSES];  // the next K-tile, on its way to shared memory
    // Global -> registers for the K-tile starting at k0; 0 outside the matrices (and the tile).
    auto load = [&](int k0) {
#pragma unroll
        for (int p = 0; p < A_PASSES; ++p) {
            const int i = threadIdx.x + p * THREADS;
            const int r = i / BK, c = i % BK;  // (row, k) in the tile; shifts for powers of two
            const bool ok = (A_TILE % THREADS == 0 || i < A_TILE) && bm + r < M && k0 + c < K;
            aReg[p] = ok ? Ablk[(size_t)r * lda + k0 + c] : 0.0f;
        }
#pragma unroll
        for (int p = 0; p < B_PASSES; ++p) {
            const int i = threadIdx.x + p * THREADS;
            const int r = i / BN, c = i % BN;  // (k, column) in the tile
            const bool ok = (B_TILE % THREADS == 0 || i < B_TILE) && k0 + r < K && bn + c < N;
            bReg[p] = ok ? Bblk[(size_t)(k0 + r) * ldb + c] : 0.0f;
        }
    };
    // Registers -> shared-memory stage s; A's element (r, c) goes to As[s][c][r] (transposed).
    auto store = [&](int s) {
#pragma unroll
        for (int p = 0; p < A_PASSES; ++p) {
            const int i = threadIdx.x + p * THREADS;
            if (A_TILE % THREADS == 0 || i < A_TILE)
                As[s][i % BK][i / BK] = aReg[p];
        }
#pragma unroll
        for (int p = 0; p < B_PASSES; ++p) {
            const int i = threadIdx.x + p * THREADS;
            if (B_TILE % THREADS == 0 || i < B_TILE)
                Bs[s][i / BN][i % BN] = bReg[p];
        }
    };

    float acc[THR_M][THR_N] = {};
    float regM[THR_M], regN[THR_N];
    const int kTiles = (K + BK - 1) / BK;  // >= 1; the last tile may be partial (zero-filled)

    load(0);
    store(0);
    __syncthreads();
    for (int t = 0; t < kTiles; ++t) {
        const int cur = t & 1;
        const bool more = t + 1 < kTiles;  // uniform over the block
        if (more)
            load((t + 1) * BK);  // in flight during the math below
#pragma unroll
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int g = 0; g < THR_M / 4; ++g) {
                const float4 a = load4(&As[cur][k][g * ROW_STEP + threadRow * 4]);
                regM[4 * g] = a.x, regM[4 * g + 1] = a.y, regM[4 * g + 2] = a.z, regM[4 * g + 3] = a.w;
            }
#pragma unroll
            for (int h = 0; h < THR_N / 4; ++h) {
                const float4 b = load4(&Bs[cur][k][h * COL_STEP + threadCol * 4]);
                regN[4 * h] = b.x, regN[4 * h + 1] = b.y, regN[4 * h + 2] = b.z, regN[4 * h + 3] = b.w;
            }
#pragma unroll
            for (int m = 0; m < THR_M; ++m)
#pragma unroll
                for (int n = 0; n < THR_N; ++n)
                    acc[m][n] += regM[m] * regN[n];
        }
        // The other stage was last read in step t - 1, and every thread has passed the barrier
        // that ended it, so it can be overwritten now; the barrier below publishes it for t + 1.
        if (more)
            store(cur ^ 1);
        __syncthreads();
    }

    // Epilogue. Micro-tile index m is row row0 + (m/4)*ROW_STEP + m%4 of D, likewise n a column.
    const int row0 = bm + threadRow * 4, col0 = bn + threadCol * 4;
    float biasReg[THR_N];  // one bias value per column, reused for THR_M rows
#pragma unroll
    for (int n = 0; n < THR_N; ++n) {
        const int col = col0 + (n / 4) * COL_STEP + n % 4;
        biasReg[n] = bias != nullptr && col < N ? bias[col] : 0.0f;
    }
    // Pass 1 (alpha, beta * C) reads all of C before pass 2 (bias, activation) writes any of D. C
    // and D may alias, so a load of C cannot move above an earlier store to D; interleaved, each
    // element's load would wait for the previous element's load-then-store. Split, the THR_M*THR_N
    // loads go out together, and in place every element is still read before it is written.
#pragma unroll
    for (int m = 0; m < THR_M; ++m)
#pragma unroll
        for (int n = 0; n < THR_N; ++n)
            acc[m][n] *= alpha;
    if (beta != 0.0f) {
#pragma unroll
        for (int m = 0; m < THR_M; ++m) {
            const int row = row0 + (m / 4) * ROW_STEP + m % 4;
#pragma unroll
            for (int n = 0; n < THR_N; ++n) {
                const int col = col0 + (n / 4) * COL_STEP + n % 4;
                if (row < M && col < N)
                    acc[m][n] += beta * C[(size_t)row * ldc + col];
            }
        }
    }
#pragma unroll
    for (int m = 0; m < THR_M; ++m) {
        const int row = row0 + (m / 4) * ROW_STEP + m % 4;
#pragma unroll
        for (int n = 0; n < THR_N; ++n) {
            const int col = col0 + (n / 4) * COL_STEP + n % 4;
            if (row < M && col < N)
                D[(size_t)row * ldd + col] = activate<ACT>(acc[m][n] + biasReg[n]);
        }
    }
}
