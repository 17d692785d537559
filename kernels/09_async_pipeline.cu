// Stage 09 - asynchronous multi-stage pipeline: the warp tiling of stage 08, fed by cp.async
// through a ring of STAGES shared-memory stages. Defaults: 128 x 256 x 8 block tile (the shape
// cuBLAS uses for strict FP32), 256 threads (8 warps of 64 x 64), 16 x 8 results per thread,
// 3 stages, one block per SM.
//
// What changes against stage 08, and why it helps:
// - cp.async copies global memory straight into shared memory. No staging registers and no
//   shared stores in the instruction stream, so registers go to a 16 x 8 micro-tile: 128 FMAs per
//   24 loaded values (0.19 shared loads per FMA instead of 0.25).
// - STAGES-deep ring: tile t+STAGES-1 is requested while tile t is computed, so STAGES-1 tiles of
//   FMAs cover the memory latency instead of one.
// - A stays transposed in shared memory (As[k][m], rows padded by 4 floats) so the fragment loads
//   are the same conflict-free float4 loads as in stage 08. The transpose is done by 4-byte
//   cp.async.ca copies: a warp copies 4 rows x 8 consecutive k (whole 32-byte sectors) and, as
//   AS_LD = 4 (mod 32), writes 32 distinct banks. With the defaults that is 4 copy instructions
//   per thread per K-step against 1024 FMAs, cheaper than an untransposed As whose fragment loads
//   would need padding tricks and 4x the registers for A. B is copied with 16-byte cp.async.cg.
// - Fragments are double-buffered in registers, and the barrier that opens tile t+1 is taken
//   before the last k of tile t: the first fragments of tile t+1 are then loaded while the last
//   FMAs of tile t run, so neither the barrier nor the shared-load latency leaves the FMA pipe
//   idle.
// Shared memory is dynamic (the 3-stage default needs 37248 bytes; deeper or wider rings exceed
// 48 KB): exactly SMEM_BYTES = 4 * STAGES * BK * (BM + 4 + BN) bytes per block.
#include "common.cuh"

#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 256
#endif
#ifndef BK
#define BK 8
#endif
#ifndef THREADS
#define THREADS 256
#endif
#ifndef WM
#define WM 64
#endif
#ifndef WN
#define WN 64
#endif
#ifndef WNITER
#define WNITER 2
#endif
#ifndef TM
#define TM 8
#endif
#ifndef TN
#define TN 4
#endif
#ifndef STAGES
#define STAGES 3
#endif
#ifndef MINBLOCKS
#define MINBLOCKS 1
#endif

constexpr int NWARPS = THREADS / 32;
constexpr int WMITER = (WM * WN) / (32 * TM * TN * WNITER);  // sub-tile steps down M
constexpr int WSUBM = WM / WMITER;                           // one warp step: WSUBM x WSUBN
constexpr int WSUBN = WN / WNITER;
constexpr int LROWS = WSUBM / TM;                            // lanes of a warp: LROWS x LCOLS
constexpr int LCOLS = WSUBN / TN;
constexpr int FM = WMITER * TM, FN = WNITER * TN;            // fragment lengths per k
constexpr int APAD = 4;                                      // As row padding (floats)
constexpr int AS_LD = BM + APAD;                             // leading dimension of As[k][m]
constexpr int A_STAGE = BK * AS_LD;                          // floats per stage
constexpr int B_STAGE = BK * BN;
constexpr int A_COPIES = BM * BK / THREADS;                  // 4-byte copies of A per thread per K-step
constexpr int B_COPIES = BN * BK / (4 * THREADS);            // 16-byte copies of B per thread per K-step
constexpr int A_ROWS_PER_PASS = THREADS / 8;                 // A: 8 threads per row of an 8-wide chunk
constexpr int A_PASSES_PER_CHUNK = BM / A_ROWS_PER_PASS;
constexpr int B_ROWS_PER_PASS = 4 * THREADS / BN;            // B: BN/4 threads per row
constexpr int SMEM_BYTES = 4 * STAGES * BK * (BM + APAD + BN);

static_assert(THREADS % 32 == 0, "THREADS must be whole warps");
static_assert(BM % WM == 0 && BN % WN == 0, "the block tile must be a whole number of warp tiles");
static_assert((BM / WM) * (BN / WN) == NWARPS, "one warp per WM x WN warp tile: THREADS == 32 * (BM/WM) * (BN/WN)");
static_assert(WNITER >= 1 && WMITER >= 1 && (WM * WN) % (32 * TM * TN * WNITER) == 0,
              "a warp tile must split into WMITER x WNITER steps of 32 lanes x TM x TN results");
static_assert(WM % WMITER == 0 && WN % WNITER == 0, "WMITER must divide WM and WNITER must divide WN");
static_assert(WSUBM % TM == 0 && WSUBN % TN == 0, "a warp step must be a whole number of thread tiles");
static_assert(LROWS * LCOLS == 32, "the lanes of a warp must cover one warp step exactly");
static_assert(LROWS % 2 == 0 && LCOLS % 2 == 0, "the lane layout needs an even number of lane rows and columns");
static_assert(TM % 4 == 0 && TN % 4 == 0, "TM and TN must be multiples of 4 (float4 fragment loads and C stores)");
static_assert(BK % 8 == 0, "BK must be a multiple of 8 (A is copied in 8-column chunks)");
static_assert(STAGES >= 2, "the ring needs at least 2 stages");
static_assert((BM * BK) % THREADS == 0, "the A tile must be a whole number of 4-byte copies per thread");
static_assert((BN * BK) % (4 * THREADS) == 0, "the B tile must be a whole number of 16-byte copies per thread");
static_assert(BM % A_ROWS_PER_PASS == 0, "BM must be a multiple of THREADS/8 (rows of A copied per pass)");
static_assert((4 * THREADS) % BN == 0, "THREADS 16-byte copies must cover whole rows of the B tile");
static_assert(SMEM_BYTES <= 227 * 1024, "a block can have at most 227 KB of shared memory");

extern "C" __global__ void __launch_bounds__(THREADS, MINBLOCKS)
sgemm_async_pipeline(int M, int N, int K, float alpha, const float* __restrict__ A,
                     const float* __restrict__ B, float beta, float* __restrict__ C) {
    extern __shared__ __align__(16) float smem[];  // SMEM_BYTES: As ring, then Bs ring
    float* As = smem;                              // [STAGES][BK][AS_LD], transposed and padded
    float* Bs = smem + STAGES * A_STAGE;           // [STAGES][BK][BN]

    const int tid = threadIdx.x;
    const int warp = tid / 32, lane = tid % 32;
    const int warpRow = warp / (BN / WN), warpCol = warp % (BN / WN);
    // Lane -> (lRow, lCol) in the LROWS x LCOLS grid of one warp step. Lane bit 0 goes to the
    // column and bit 1 to the row, so lanes n and n^1 read the same A fragment and lanes n and
    // n^2 the same B fragment: the pairing that lets shared memory return a 128-bit broadcast at
    // twice the rate. The upper lane bits fill the remaining column bits, then the row bits.
    const int laneHi = lane >> 2;
    const int lCol = (lane & 1) | ((laneHi % (LCOLS / 2)) << 1);
    const int lRow = ((lane >> 1) & 1) | ((laneHi / (LCOLS / 2)) << 1);

    // Copy maps. A: 8 threads per row of an 8-column chunk; pass i copies THREADS/8 rows of chunk
    // i / A_PASSES_PER_CHUNK, element (row, col) going to As[col][row]. B: BN/4 threads per row,
    // pass i copies rows bRow + i * B_ROWS_PER_PASS.
    const int aRow = tid / 8, aCol = tid % 8;
    const int bRow = tid / (BN / 4), bCol = (tid % (BN / 4)) * 4;
    const float* aG = A + (size_t)(blockIdx.y * BM + aRow) * K + aCol;
    const float* bG = B + (size_t)bRow * N + (size_t)blockIdx.x * BN + bCol;
    // Shared-state-space byte addresses of this thread's copy targets in stage 0.
    const unsigned aS = smem_u32(As + aCol * AS_LD + aRow);
    const unsigned bS = smem_u32(Bs + bRow * BN + bCol);

    // Issue the copies of K-tile `tile` into ring slot `stage` (no commit).
    auto loadTile = [&](int stage, int tile) {
        const float* a = aG + tile * BK;
        const float* b = bG + (size_t)tile * BK * N;
#pragma unroll
        for (int i = 0; i < A_COPIES; ++i) {
            const int row = (i % A_PASSES_PER_CHUNK) * A_ROWS_PER_PASS, col = (i / A_PASSES_PER_CHUNK) * 8;
            cp_async_4_l2_128b(aS + 4 * (stage * A_STAGE + col * AS_LD + row), a + (size_t)row * K + col);
        }
#pragma unroll
        for (int i = 0; i < B_COPIES; ++i)
            cp_async_16_l2_128b(bS + 4 * (stage * B_STAGE + i * B_ROWS_PER_PASS * BN),
                                b + (size_t)(i * B_ROWS_PER_PASS) * N);
    };

    // This thread's fragment origins inside a stage; step (wm, wn) adds wm*WSUBM / wn*WSUBN.
    const int aFrag = warpRow * WM + lRow * TM;
    const int bFrag = warpCol * WN + lCol * TN;
    float regM[2][FM], regN[2][FN];  // fragments of k (being used) and k+1 (being loaded)
    auto loadFrag = [&](int buf, const float* as, const float* bs, int k) {
#pragma unroll
        for (int wm = 0; wm < WMITER; ++wm)
#pragma unroll
            for (int i = 0; i < TM; i += 4) {
                const float4 v = *reinterpret_cast<const float4*>(&as[k * AS_LD + wm * WSUBM + i]);
                regM[buf][wm * TM + i + 0] = v.x;
                regM[buf][wm * TM + i + 1] = v.y;
                regM[buf][wm * TM + i + 2] = v.z;
                regM[buf][wm * TM + i + 3] = v.w;
            }
#pragma unroll
        for (int wn = 0; wn < WNITER; ++wn)
#pragma unroll
            for (int j = 0; j < TN; j += 4) {
                const float4 v = *reinterpret_cast<const float4*>(&bs[k * BN + wn * WSUBN + j]);
                regN[buf][wn * TN + j + 0] = v.x;
                regN[buf][wn * TN + j + 1] = v.y;
                regN[buf][wn * TN + j + 2] = v.z;
                regN[buf][wn * TN + j + 3] = v.w;
            }
    };

    const int numTiles = K / BK;
    // Prologue: request tiles 0 .. STAGES-2, one commit group each (empty groups past the end
    // keep the group count, and so the wait below, the same for every K).
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < numTiles)
            loadTile(s, s);
        cp_async_commit();
    }
    cp_async_wait<STAGES - 2>();  // this thread's copies of tile 0 have landed ...
    __syncthreads();              // ... and everybody else's
    const float* as = As + aFrag;  // fragment pointers into the ring slot being computed
    const float* bs = Bs + bFrag;
    loadFrag(0, as, bs, 0);

    float acc[FM][FN] = {};
    int readStage = 0, writeStage = STAGES - 1;
    for (int t = 0; t < numTiles; ++t) {
        // Ring slot writeStage = (t-1) % STAGES held tile t-1, whose last reads happened before
        // the barrier that opened tile t: refill it with tile t+STAGES-1.
        if (t + STAGES - 1 < numTiles)
            loadTile(writeStage, t + STAGES - 1);
        cp_async_commit();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            if (k < BK - 1) {
                loadFrag((k + 1) % 2, as, bs, k + 1);
            } else if (t + 1 < numTiles) {  // uniform across the block
                // Open tile t+1 before the last FMAs of tile t. Groups committed so far: tiles
                // 0 .. t+STAGES-1; allowing STAGES-2 in flight means tile t+1 has landed.
                cp_async_wait<STAGES - 2>();
                __syncthreads();  // everyone's copies visible; everyone done reading slot t
                readStage = readStage + 1 == STAGES ? 0 : readStage + 1;
                writeStage = writeStage + 1 == STAGES ? 0 : writeStage + 1;
                as = As + readStage * A_STAGE + aFrag;
                bs = Bs + readStage * B_STAGE + bFrag;
                loadFrag((k + 1) % 2, as, bs, 0);
            }
            // Outer product of the fragments of this k: FM x FN FMAs from FM + FN values.
#pragma unroll
            for (int m = 0; m < FM; ++m)
#pragma unroll
                for (int n = 0; n < FN; ++n)
                    acc[m][n] += regM[k % 2][m] * regN[k % 2][n];
        }
    }

    // Epilogue: result (wm, i; wn, j) of this thread is C row aFrag + wm*WSUBM + i, column
    // bFrag + wn*WSUBN + j of the block tile. Each float4 store of a warp writes LROWS rows of
    // LCOLS * 16 contiguous bytes.
    float* cT = C + (size_t)(blockIdx.y * BM + aFrag) * N + (size_t)blockIdx.x * BN + bFrag;
#pragma unroll
    for (int wm = 0; wm < WMITER; ++wm)
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int wn = 0; wn < WNITER; ++wn)
#pragma unroll
                for (int j = 0; j < TN; j += 4) {
                    float* c = cT + (size_t)(wm * WSUBM + i) * N + wn * WSUBN + j;
                    const float* a = &acc[wm * TM + i][wn * TN + j];
                    *reinterpret_cast<float4*>(c) =
                        epilogue4(alpha, make_float4(a[0], a[1], a[2], a[3]), beta, c);
                }
}
