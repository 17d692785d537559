// Stage 08 - warp tiling: a block of THREADS threads computes a BM x BN tile of C; each warp owns
// a WM x WN sub-tile of it, swept in WMITER x WNITER steps of (WM/WMITER) x (WN/WNITER); in each
// step every lane computes a TM x TN micro-tile. Defaults: 128 x 128 x 8 block tile, 256 threads
// (8 warps of 32 x 64), 8 x 8 results per thread, two blocks per SM.
//
// Why each piece helps:
// - Register tiling in two dimensions: per k a thread loads WMITER*TM values of A and WNITER*TN
//   values of B (8 + 8 with the defaults) and does 8 * 8 FMAs with them, so shared-memory loads
//   fall to 0.25 per FMA, all of them 128-bit.
// - A is stored transposed, As[k][m], so that a thread's TM values of A for one k are contiguous
//   and load with float4 like those of B. Its rows are padded by 4 floats: the transposing scalar
//   stores then hit 32 different banks, and rows stay 16-byte aligned.
// - Warp tiles: a warp reads only WM + WN floats per k from shared memory; with 4 x 8 lanes per
//   sub-tile, each 128-bit load touches 4 (A) or 8 (B) distinct 16-byte words, all in different
//   banks, and the rest of the warp gets them by broadcast.
// - Two shared-memory stages with a register prefetch: the global loads of tile t+1 are issued
//   before the FMAs of tile t and stored to the other stage after them, so their latency hides
//   behind the arithmetic and one __syncthreads per K-step is enough.
// Global loads per result: K/BN + K/BM = K/64 (all float4); shared loads per result: 2K/8.
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
#ifndef THREADS
#define THREADS 256
#endif
#ifndef WM
#define WM 32
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
#ifndef MINBLOCKS
#define MINBLOCKS 2
#endif

constexpr int NWARPS = THREADS / 32;
constexpr int WMITER = (WM * WN) / (32 * TM * TN * WNITER);  // sub-tile steps down M
constexpr int WSUBM = WM / WMITER;                           // one warp step: WSUBM x WSUBN
constexpr int WSUBN = WN / WNITER;
constexpr int LROWS = WSUBM / TM;                            // lanes of a warp: LROWS x LCOLS
constexpr int LCOLS = WSUBN / TN;
constexpr int APAD = 4;                                      // As row padding (floats)
constexpr int AS_LD = BM + APAD;                             // leading dimension of As[k][m]
constexpr int A_QUADS = BM * BK / (4 * THREADS);             // float4 of A per thread per K-step
constexpr int B_QUADS = BN * BK / (4 * THREADS);             // float4 of B per thread per K-step
constexpr int A_ROWS_PER_PASS = THREADS / 2;                 // A: 2 float4 per row and 8-wide chunk
constexpr int A_PASSES_PER_CHUNK = BM / A_ROWS_PER_PASS;
constexpr int B_ROWS_PER_PASS = 4 * THREADS / BN;            // B: BN/4 float4 per row
constexpr int SMEM_BYTES = 2 * BK * (AS_LD + BN) * 4;

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
static_assert((BM * BK) % (4 * THREADS) == 0, "the A tile must be a whole number of float4 per thread");
static_assert((BN * BK) % (4 * THREADS) == 0, "the B tile must be a whole number of float4 per thread");
static_assert(BM % A_ROWS_PER_PASS == 0, "BM must be a multiple of THREADS/2 (rows of A copied per pass)");
static_assert((4 * THREADS) % BN == 0, "THREADS float4 must cover whole rows of the B tile");
static_assert(SMEM_BYTES <= 48 * 1024, "static shared memory is limited to 48 KB");

extern "C" __global__ void __launch_bounds__(THREADS, MINBLOCKS)
sgemm_warptiling(int M, int N, int K, float alpha, const float* __restrict__ A,
                 const float* __restrict__ B, float beta, float* __restrict__ C) {
    __shared__ __align__(16) float As[2][BK * AS_LD];  // [stage][k][m], transposed and padded
    __shared__ __align__(16) float Bs[2][BK * BN];     // [stage][k][n]

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

    // Global -> shared copy maps. A: two float4 per row of an 8-column chunk, so a warp reads 16
    // rows x 32 contiguous bytes (whole sectors) and its transposed scalar stores, at
    // (col * AS_LD + row) with AS_LD = 4 (mod 32), land in 32 distinct banks. Pass i covers
    // THREADS/2 rows of chunk i / A_PASSES_PER_CHUNK.
    const int aRow = tid / 2, aCol = (tid % 2) * 4;
    // B: BN/4 consecutive threads read one row of the tile (512 contiguous bytes per warp).
    const int bRow = tid / (BN / 4), bCol = (tid % (BN / 4)) * 4;

    const float* aG = A + (size_t)(blockIdx.y * BM + aRow) * K + aCol;
    const float* bG = B + (size_t)bRow * N + (size_t)blockIdx.x * BN + bCol;

    float4 aReg[A_QUADS], bReg[B_QUADS];  // the next tile, in flight between global and shared
    auto loadGlobal = [&]() {
#pragma unroll
        for (int i = 0; i < A_QUADS; ++i) {
            const int row = (i % A_PASSES_PER_CHUNK) * A_ROWS_PER_PASS, col = (i / A_PASSES_PER_CHUNK) * 8;
            aReg[i] = *reinterpret_cast<const float4*>(aG + (size_t)row * K + col);
        }
#pragma unroll
        for (int i = 0; i < B_QUADS; ++i)
            bReg[i] = *reinterpret_cast<const float4*>(bG + (size_t)(i * B_ROWS_PER_PASS) * N);
    };
    auto storeShared = [&](int stage) {
#pragma unroll
        for (int i = 0; i < A_QUADS; ++i) {
            const int row = aRow + (i % A_PASSES_PER_CHUNK) * A_ROWS_PER_PASS;
            float* as = &As[stage][((i / A_PASSES_PER_CHUNK) * 8 + aCol) * AS_LD + row];
            as[0 * AS_LD] = aReg[i].x;  // transpose: the 4 k values go to 4 rows of As
            as[1 * AS_LD] = aReg[i].y;
            as[2 * AS_LD] = aReg[i].z;
            as[3 * AS_LD] = aReg[i].w;
        }
#pragma unroll
        for (int i = 0; i < B_QUADS; ++i)
            *reinterpret_cast<float4*>(&Bs[stage][(bRow + i * B_ROWS_PER_PASS) * BN + bCol]) = bReg[i];
    };

    float acc[WMITER * TM][WNITER * TN] = {};
    // This thread's fragment origins inside a stage; step (wm, wn) adds wm*WSUBM / wn*WSUBN.
    const int aFrag = warpRow * WM + lRow * TM;
    const int bFrag = warpCol * WN + lCol * TN;

    const int numTiles = K / BK;
    loadGlobal();
    storeShared(0);
    __syncthreads();
    for (int t = 0; t < numTiles; ++t) {
        const int cur = t & 1;
        const bool more = t + 1 < numTiles;  // uniform across the block
        if (more) {  // issue the next tile's loads now; they complete during the FMAs below
            aG += BK;
            bG += (size_t)BK * N;
            loadGlobal();
        }
        const float* as = &As[cur][aFrag];
        const float* bs = &Bs[cur][bFrag];
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float regM[WMITER * TM], regN[WNITER * TN];
#pragma unroll
            for (int wm = 0; wm < WMITER; ++wm)
#pragma unroll
                for (int i = 0; i < TM; i += 4) {
                    const float4 v = *reinterpret_cast<const float4*>(&as[k * AS_LD + wm * WSUBM + i]);
                    regM[wm * TM + i + 0] = v.x;
                    regM[wm * TM + i + 1] = v.y;
                    regM[wm * TM + i + 2] = v.z;
                    regM[wm * TM + i + 3] = v.w;
                }
#pragma unroll
            for (int wn = 0; wn < WNITER; ++wn)
#pragma unroll
                for (int j = 0; j < TN; j += 4) {
                    const float4 v = *reinterpret_cast<const float4*>(&bs[k * BN + wn * WSUBN + j]);
                    regN[wn * TN + j + 0] = v.x;
                    regN[wn * TN + j + 1] = v.y;
                    regN[wn * TN + j + 2] = v.z;
                    regN[wn * TN + j + 3] = v.w;
                }
            // Outer product: (WMITER*TM) x (WNITER*TN) FMAs from as many + as many loaded values.
#pragma unroll
            for (int m = 0; m < WMITER * TM; ++m)
#pragma unroll
                for (int n = 0; n < WNITER * TN; ++n)
                    acc[m][n] += regM[m] * regN[n];
        }
        // The other stage was last read during tile t-1, before the barrier that ended it.
        if (more)
            storeShared(cur ^ 1);
        __syncthreads();  // the stores are visible, and nobody still reads stage `cur`
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
