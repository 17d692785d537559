// Stage 06 - vectorised memory access: the 2-D register tiling of stage 05 (BM = BN = 128, BK = 8,
// TM = TN = 8, 256 threads) with 128-bit loads and stores wherever the data is contiguous.
//
// Global -> shared: A and B are read as float4, four times fewer load instructions for the same
// bytes. The A tile is transposed on its way into shared memory (As is BK x BM), so that for a
// fixed k a thread's TM values of A are contiguous, like its TN values of B in Bs; the inner loop
// then fetches regM and regN with TM/4 + TN/4 LDS.128 instead of TM + TN scalar loads (4 instead
// of 16 at 8 x 8: 0.0625 shared-load instructions per FMA, stage 05: 0.25). C is read and written
// as float4 too. Global traffic per result is unchanged (K/BN + K/BM = K/64).
// Requires 16-byte aligned A, B and C (any cudaMalloc allocation) and N, K multiples of 4, which
// the tile multiples guarantee.
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
static_assert(TM % 4 == 0 && TN % 4 == 0, "TM and TN must be multiples of 4 (float4 fragments)");
static_assert(BK % 4 == 0, "BK must be a multiple of 4 (float4 loads along a row of A)");
constexpr int THREADS = (BM / TM) * (BN / TN);
static_assert(THREADS <= 1024, "(BM/TM) * (BN/TN) must not exceed 1024 threads");
// Tile copies in float4 units: thread t loads vectors t, t + THREADS, ... in row-major order
// (consecutive threads on consecutive 16-byte pieces of a row); a last, partial pass is guarded.
constexpr int A_VECS = BM * BK / 4, B_VECS = BK * BN / 4;
constexpr int A_PASSES = (A_VECS + THREADS - 1) / THREADS;
constexpr int B_PASSES = (B_VECS + THREADS - 1) / THREADS;

extern "C" __global__ void __launch_bounds__(THREADS)
sgemm_vectorized(int M, int N, int K, float alpha, const float* __restrict__ A,
                 const float* __restrict__ B, float beta, float* __restrict__ C) {
    __shared__ __align__(16) float As[BK * BM];  // BK x BM: A's tile transposed
    __shared__ __align__(16) float Bs[BK * BN];  // BK x BN, row-major (as in B)

    const int threadCol = threadIdx.x % (BN / TN);
    const int threadRow = threadIdx.x / (BN / TN);

    A += (size_t)blockIdx.y * BM * K;
    B += (size_t)blockIdx.x * BN;
    C += (size_t)blockIdx.y * BM * N + (size_t)blockIdx.x * BN;

    float acc[TM][TN] = {};
    float regM[TM], regN[TN];
    for (int k0 = 0; k0 < K; k0 += BK) {
        // Vector v of the A tile covers row v / (BK/4), columns 4*(v % (BK/4)) .. +3; its four
        // values land in four rows of As, at column `row`.
#pragma unroll
        for (int p = 0; p < A_PASSES; ++p) {
            const int v = threadIdx.x + p * THREADS;
            if (A_VECS % THREADS == 0 || v < A_VECS) {
                const int row = v / (BK / 4), col = (v % (BK / 4)) * 4;
                const float4 a = load4(&A[(size_t)row * K + col]);
                As[(col + 0) * BM + row] = a.x;
                As[(col + 1) * BM + row] = a.y;
                As[(col + 2) * BM + row] = a.z;
                As[(col + 3) * BM + row] = a.w;
            }
        }
#pragma unroll
        for (int p = 0; p < B_PASSES; ++p) {
            const int v = threadIdx.x + p * THREADS;
            if (B_VECS % THREADS == 0 || v < B_VECS) {
                const int row = v / (BN / 4), col = (v % (BN / 4)) * 4;
                store4(&Bs[row * BN + col], load4(&B[(size_t)row * N + col]));
            }
        }
        __syncthreads();
        A += BK;
        B += (size_t)BK * N;

#pragma unroll
        for (int k = 0; k < BK; ++k) {
            // Both fragments are contiguous rows of shared memory now: TM/4 + TN/4 vector loads.
#pragma unroll
            for (int m = 0; m < TM; m += 4) {
                const float4 a = load4(&As[k * BM + threadRow * TM + m]);
                regM[m] = a.x, regM[m + 1] = a.y, regM[m + 2] = a.z, regM[m + 3] = a.w;
            }
#pragma unroll
            for (int n = 0; n < TN; n += 4) {
                const float4 b = load4(&Bs[k * BN + threadCol * TN + n]);
                regN[n] = b.x, regN[n + 1] = b.y, regN[n + 2] = b.z, regN[n + 3] = b.w;
            }
#pragma unroll
            for (int m = 0; m < TM; ++m)
#pragma unroll
                for (int n = 0; n < TN; ++n)
                    acc[m][n] += regM[m] * regN[n];
        }
        __syncthreads();
    }
    // Epilogue in float4 pieces of a row; with beta == 0 C is not read (it may hold NaN).
#pragma unroll
    for (int m = 0; m < TM; ++m)
#pragma unroll
        for (int n = 0; n < TN; n += 4) {
            float* c = &C[(size_t)(threadRow * TM + m) * N + threadCol * TN + n];
            float4 r = make_float4(alpha * acc[m][n], alpha * acc[m][n + 1], alpha * acc[m][n + 2],
                                   alpha * acc[m][n + 3]);
            if (beta != 0.0f) {
                const float4 old = load4(c);
                r.x += beta * old.x, r.y += beta * old.y, r.z += beta * old.z, r.w += beta * old.w;
            }
            store4(c, r);
        }
}
