// Stage 04 (work per thread) - the shared-memory tiles of stage 03 with WPT results per thread: a
// block computes a TS x TS tile of C with TS x (TS/WPT) threads (TS = 32, WPT = 8: 128 threads).
//
// Thread (ty, tx) owns column tx and rows ty, ty + RTS, ty + 2*RTS, ... (RTS = TS/WPT). The rows
// are strided rather than adjacent so that, for every w, the threads of a warp write consecutive
// columns of one row of C (coalesced stores), and the same map loads the tiles: WPT coalesced rows
// of A and of B per thread and K-step.
// Inner loop: one Bs value goes to a register and serves WPT FMAs, each with an As value that is
// a broadcast across the warp. Shared loads per FMA fall from 2 (stage 03) to (1 + WPT) / WPT;
// global loads per result stay 2K/TS (K/16 at TS = 32), and the block has WPT times fewer threads,
// each with WPT independent accumulators to hide latency.
#include "common.cuh"

// The harness passes every config parameter as a macro; the block_tile rule names the tile
// BM = BN = BK = TS and the per-thread results TM = WPT, so those are accepted as defaults.
#ifndef TS
#ifdef BM
#define TS BM
#else
#define TS 32
#endif
#endif
#ifndef WPT
#ifdef TM
#define WPT TM
#else
#define WPT 8
#endif
#endif
#ifdef BM
static_assert(BM == TS, "BM must equal TS");
#endif
#ifdef BN
static_assert(BN == TS, "BN must equal TS");
#endif
#ifdef BK
static_assert(BK == TS, "BK must equal TS");
#endif
#ifdef TM
static_assert(TM == WPT, "TM must equal WPT");
#endif
static_assert(TS % WPT == 0, "TS must be a multiple of WPT (WPT rows of threads per tile)");
constexpr int RTS = TS / WPT;        // rows of threads in a block = stride between a thread's rows
constexpr int THREADS = TS * RTS;
static_assert(THREADS <= 1024, "TS * TS / WPT must not exceed 1024 threads");

extern "C" __global__ void __launch_bounds__(THREADS)
sgemm_wpt(int M, int N, int K, float alpha, const float* __restrict__ A,
          const float* __restrict__ B, float beta, float* __restrict__ C) {
    __shared__ float As[TS * TS];
    __shared__ float Bs[TS * TS];

    // tx fastest: a warp spans consecutive columns (all of one row when TS = 32).
    const int tx = threadIdx.x % TS;
    const int ty = threadIdx.x / TS;

    A += (size_t)blockIdx.y * TS * K;
    B += (size_t)blockIdx.x * TS;
    C += (size_t)blockIdx.y * TS * N + (size_t)blockIdx.x * TS;

    float acc[WPT] = {0.0f};
    for (int k0 = 0; k0 < K; k0 += TS) {
        // WPT loads of each tile per thread; row ty + w*RTS, column tx (coalesced along a row).
#pragma unroll
        for (int w = 0; w < WPT; ++w) {
            const int r = ty + w * RTS;
            As[r * TS + tx] = A[(size_t)r * K + tx];
            Bs[r * TS + tx] = B[(size_t)r * N + tx];
        }
        __syncthreads();
        A += TS;
        B += (size_t)TS * N;
#pragma unroll
        for (int k = 0; k < TS; ++k) {
            const float b = Bs[k * TS + tx];  // one shared load, reused WPT times
#pragma unroll
            for (int w = 0; w < WPT; ++w)
                acc[w] += As[(ty + w * RTS) * TS + k] * b;  // broadcast within a row of threads
        }
        __syncthreads();
    }
#pragma unroll
    for (int w = 0; w < WPT; ++w) {
        float* c = &C[(size_t)(ty + w * RTS) * N + tx];
        *c = epilogue(alpha, acc[w], beta, c);
    }
}
