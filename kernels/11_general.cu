// Stage 11 - general shapes at tiled speed, and split-K for shapes that cannot fill the GPU.
// The warp tiling of stage 08 (by default its fastest measured tile: 128 x 128, 128 threads in 4 warps
// of 64 x 64, 16 x 8 results per thread, two blocks per SM) for any M, N, K >= 1 on packed row-major
// data, with K-steps of 8 rather than stage 08's 16: this kernel holds more than stage 08 beside its
// main loop, and at 16 the next K-step's 32 staging registers left ptxas (at 255) issuing their loads
// late; at 8 it needs 16 (measured in kernels/NOTES.md).
//
// What it adds, and why it costs (almost) nothing on the shapes stage 08 already ran:
// - Bounds only where they are needed. A block whose tile lies inside M and N, on a K-tile inside
//   K, loads float4 with no checks, exactly as stage 08. Only the blocks on the bottom and right
//   edges, and the last (partial) K-tile, take the checked path, which loads zeros outside the
//   matrix so the FMAs need no branches. The choice is uniform across the block.
// - Alignment. A row of A starts 16-byte aligned only when K is a multiple of 4, a row of B or C
//   only when N is. When either is not (or a base pointer is not 16-byte aligned), A and B are read
//   with 4-byte loads by a second instance of the block code; C is stored with float4 wherever its
//   rows are aligned, independently of A and B.
// - Split-K. A 1024^3 product has 64 tiles of 128 x 128: 0.24 of the 264 blocks the H100 runs at
//   once. The launch plan (geometry: SPLIT_SLOTS) then splits K into gridDim.z slices, one block
//   each, as many as the resident blocks allow (132 of a 128 x 96 x 49152 product's 4 tiles of
//   64 x 64). The partial tiles meet in a fixed binary tree over slice indices: at each node the
//   first block to arrive stores its sum and the second adds it to its own and climbs, so the
//   critical path is log2(S) reads of a tile, not S, and the sum is the same whatever the order of
//   arrival (no floating-point atomics). Workspace, counters and flags are module globals sized by
//   SPLIT_SLOTS; the second block at a node resets the node's counter and flag, so the next launch
//   starts from zero. Two launches of this module must therefore not run at the same time on
//   different streams.
// - Grouped tile order (GROUP_M): consecutive blocks walk GROUP_M tile rows down before moving
//   right, so the blocks resident at one time share rows of A and columns of B in L2.

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
#define THREADS 128
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
#ifndef MINBLOCKS
#define MINBLOCKS 2
#endif
#ifndef SPLIT_SLOTS
#define SPLIT_SLOTS 264  // blocks the split-K workspace holds (launch plan: tiles * splits <= this)
#endif
#ifndef SPLIT_WAVES
#define SPLIT_WAVES 1  // waves of SPLIT_SLOTS blocks the workspace holds: > 1 lets the plan split more tiles than one wave
#endif
#ifndef GROUP_M
#define GROUP_M 8
#endif
#ifndef TOP_LOADS
// 1: the 16-byte main loop in stage 08's form (next tile's loads at the top of the round, under a
// uniform branch) and the 4-byte instance out of line; 0: both instances inline, the next tile loaded
// unconditionally. Which schedules better depends on the tile (ptxas; measured in kernels/NOTES.md).
#define TOP_LOADS 1
#endif
#ifndef SCALAR_MAPS
// 1: the 4-byte instance copies with consecutive lanes on consecutive floats of a row (a warp's load of
// B reads 128 consecutive bytes of a row, of A BK consecutive floats of each of 32 / BK rows); 0: the
// float4 maps read 4 bytes at a time (a warp's lanes 16 bytes apart). 1 needs more registers for its addresses: the 128 x 128 tile then
// spills, so the choice is per tile (measured in kernels/NOTES.md).
#define SCALAR_MAPS 0
#endif

constexpr int NWARPS = THREADS / 32;
constexpr int WMITER = (WM * WN) / (32 * TM * TN * WNITER);  // sub-tile steps down M
constexpr int WSUBM = WM / WMITER;                           // one warp step: WSUBM x WSUBN
constexpr int WSUBN = WN / WNITER;
constexpr int LROWS = WSUBM / TM;                            // lanes of a warp: LROWS x LCOLS
constexpr int LCOLS = WSUBN / TN;
constexpr int FM = WMITER * TM, FN = WNITER * TN;            // results per thread: FM x FN
constexpr int QUADS = FM * FN / 4;                           // ... as float4
constexpr int APAD = 4;                                      // As row padding (floats)
constexpr int AS_LD = BM + APAD;                             // leading dimension of As[k][m]
constexpr int A_QUADS = BM * BK / (4 * THREADS);             // float4 of A per thread per K-step
constexpr int B_QUADS = BN * BK / (4 * THREADS);             // float4 of B per thread per K-step
constexpr int A_ROWS_PER_PASS = THREADS / 2;                 // A: 2 float4 per row and 8-wide chunk
constexpr int A_PASSES_PER_CHUNK = BM / A_ROWS_PER_PASS;
constexpr int B_ROWS_PER_PASS = 4 * THREADS / BN;            // B: BN/4 float4 per row
constexpr int SMEM_BYTES = 2 * BK * (AS_LD + BN) * 4;
// The 4-byte maps (SCALAR_MAPS): element e of a thread is the float at linear position e * THREADS + tid
// of the tile (A: BK floats a row, B: BN).
constexpr int A_SCALARS = BM * BK / THREADS;                 // floats of A per thread per K-step
constexpr int B_SCALARS = BN * BK / THREADS;
constexpr int A_S_ROWS = THREADS / BK;                       // A: rows per pass (BK lanes a row)

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
static_assert(!SCALAR_MAPS || (THREADS % BK == 0 && (THREADS % BN == 0 || BN % THREADS == 0)),
              "SCALAR_MAPS: THREADS must cover whole rows of BK floats, and THREADS and BN divide one another");
static_assert((BM * BK) % (4 * THREADS) == 0, "the A tile must be a whole number of float4 per thread");
static_assert((BN * BK) % (4 * THREADS) == 0, "the B tile must be a whole number of float4 per thread");
static_assert(BM % A_ROWS_PER_PASS == 0, "BM must be a multiple of THREADS/2 (rows of A copied per pass)");
static_assert((4 * THREADS) % BN == 0, "THREADS float4 must cover whole rows of the B tile");
static_assert(SMEM_BYTES <= 48 * 1024, "static shared memory is limited to 48 KB");
static_assert(SPLIT_SLOTS >= 0 && GROUP_M >= 1, "SPLIT_SLOTS >= 0 (0: no split-K) and GROUP_M >= 1");
static_assert(SPLIT_WAVES >= 1, "SPLIT_WAVES >= 1");
constexpr int SPLIT_BLOCKS = SPLIT_SLOTS * SPLIT_WAVES;     // blocks of a split launch the workspace holds

#if SPLIT_SLOTS > 0
// Split-K scratch: one partial tile per block of a split launch, in the thread-private order
// [block][quad][thread] (every store and load coalesced), and per node of a tile's tree (S - 1 per tile,
// from tile * S) an arrival counter and a flag that says the first block's sum has landed.
__device__ float4 splitPartials[SPLIT_BLOCKS * QUADS * THREADS];
__device__ unsigned int splitArrivals[2 * SPLIT_BLOCKS];  // counters, then flags (+ SPLIT_BLOCKS)
#endif

// The whole block: main loop, partial K-tile, epilogue (and split-K reduction). VEC: A and B are
// read with 16-byte loads (K and N multiples of 4, base pointers 16-byte aligned).
template <bool VEC>
__device__ __forceinline__ void gemmBlock(int M, int N, int K, float alpha, const float* __restrict__ A,
                                          const float* __restrict__ B, float beta, float* __restrict__ C,
                                          float (&As)[2][BK * AS_LD], float (&Bs)[2][BK * BN]) {
    // Tile of this block in grouped order: linear id -> groups of GROUP_M tile rows, walked down
    // the rows of a group first. gridDim.x = tiles along N, gridDim.y = tiles along M.
    const int tilesN = gridDim.x, tilesM = gridDim.y;
    const int tile = blockIdx.y * tilesN + blockIdx.x;
    const int perGroup = GROUP_M * tilesN;
    const int firstRow = (tile / perGroup) * GROUP_M;
    const int groupRows = min(tilesM - firstRow, GROUP_M);
    const int tileRow = firstRow + (tile % perGroup) % groupRows;
    const int tileCol = (tile % perGroup) / groupRows;
    const int row0 = tileRow * BM, col0 = tileCol * BN;

    // K-tiles of this split: [tBegin, tEnd); those below kFull lie wholly inside K, and the one at
    // kFull (if K % BK != 0) is partial.
    const int kTiles = (K + BK - 1) / BK, kFull = K / BK;
    const int perSplit = (kTiles + gridDim.z - 1) / gridDim.z;
    const int tBegin = blockIdx.z * perSplit, tEnd = min(kTiles, tBegin + perSplit);
    const int fullEnd = max(tBegin, min(tEnd, kFull));
#if SPLIT_SLOTS > 0
    // The launch plan keeps tilesM * tilesN * gridDim.z <= SPLIT_BLOCKS; anything else would overrun the
    // split-K workspace, so stop loudly (here, before the main loop, so that nothing of it stays live
    // across the loop).
    if (gridDim.z > 1 && tilesM * tilesN * (int)gridDim.z > SPLIT_BLOCKS)
        __trap();
#endif

    const int tid = threadIdx.x;
    const int warp = tid / 32, lane = tid % 32;
    const int warpRow = warp / (BN / WN), warpCol = warp % (BN / WN);
    // Lane -> (lRow, lCol) as in stage 08: lanes n and n^1 share A fragments, n and n^2 B fragments.
    const int laneHi = lane >> 2;
    const int lCol = (lane & 1) | ((laneHi % (LCOLS / 2)) << 1);
    const int lRow = ((lane >> 1) & 1) | ((laneHi / (LCOLS / 2)) << 1);

    // Copy maps of stage 08. A: two float4 per row of an 8-column chunk, pass p covering rows
    // aRow + p * A_ROWS_PER_PASS; B: BN/4 threads per row, the thread's 4 columns at bCol.
    const int aRow = tid / 2, aCol = (tid % 2) * 4;
    const int bRow = tid / (BN / 4), bCol = (tid % (BN / 4)) * 4;
    // Clamped sources: a row of A past M reads row M-1, columns of B past N read column N-1 (or
    // the last aligned 4 columns). Their products land in rows / columns of the tile that are
    // never stored, and they are real, finite matrix elements.
    const float* aSrc[A_PASSES_PER_CHUNK];
#pragma unroll
    for (int p = 0; p < A_PASSES_PER_CHUNK; ++p)
        aSrc[p] = A + (size_t)min(row0 + aRow + p * A_ROWS_PER_PASS, M - 1) * K + aCol;
    const int bColC = VEC ? min(col0 + bCol, N - 4) : min(col0 + bCol, N - 1);
    const float* bSrc = B + (size_t)bRow * N + bColC;
    // Scalar B: the 4 columns are clamped one by one (they need not be consecutive at the edge).
    const int bStep1 = min(col0 + bCol + 1, N - 1) - bColC, bStep2 = min(col0 + bCol + 2, N - 1) - bColC,
              bStep3 = min(col0 + bCol + 3, N - 1) - bColC;

    // 4-byte maps (SCALAR_MAPS, 4-byte instance). A: lane column aK = tid % BK of rows tid / BK + e *
    // A_S_ROWS (clamped to M - 1). B: element e at tile row / column bRowS(e) / bColS(e), the column
    // clamped to N - 1; with THREADS % BN == 0 a thread keeps one column, else it walks a row.
    constexpr bool MAPS = !VEC && SCALAR_MAPS;
    const int aK = tid % BK, aRow0 = row0 + tid / BK;
    auto bRowS = [&](int e) { return THREADS % BN == 0 ? tid / BN + e * (THREADS / BN) : e / (BN / THREADS); };
    auto bColS = [&](int e) { return THREADS % BN == 0 ? tid % BN : tid + (e % (BN / THREADS)) * THREADS; };
    auto bSrcS = [&](int e) { return B + min(col0 + bColS(e), N - 1); };
    auto aSrcS = [&](int e) { return A + (size_t)min(aRow0 + e * A_S_ROWS, M - 1) * K + aK; };

    float4 aReg[A_QUADS], bReg[B_QUADS];  // the next tile, in flight between global and shared
    float aS[MAPS ? A_SCALARS : 1], bS[MAPS ? B_SCALARS : 1];  // ... (4-byte maps)
    auto loadFull = [&](int t) {  // K-tile t < kFull: every address is inside the matrix
        if constexpr (MAPS) {
#pragma unroll
            for (int e = 0; e < A_SCALARS; ++e)
                aS[e] = __ldg(aSrcS(e) + t * BK);
#pragma unroll
            for (int e = 0; e < B_SCALARS; ++e)
                bS[e] = __ldg(bSrcS(e) + (size_t)(t * BK + bRowS(e)) * N);
            return;
        }
#pragma unroll
        for (int i = 0; i < A_QUADS; ++i)
            aReg[i] = ld4<VEC>(aSrc[i % A_PASSES_PER_CHUNK] + t * BK + (i / A_PASSES_PER_CHUNK) * 8);
#pragma unroll
        for (int i = 0; i < B_QUADS; ++i) {
            const float* b = bSrc + (size_t)(t * BK + i * B_ROWS_PER_PASS) * N;
            bReg[i] = VEC ? ld4<true>(b) : make_float4(__ldg(b), __ldg(b + bStep1), __ldg(b + bStep2), __ldg(b + bStep3));
        }
    };
    auto loadPartial = [&](int t) {  // the partial K-tile: zeros past K
        if constexpr (MAPS) {
            const int k = t * BK + aK;
#pragma unroll
            for (int e = 0; e < A_SCALARS; ++e)
                aS[e] = k < K ? aSrcS(e)[t * BK] : 0.0f;
#pragma unroll
            for (int e = 0; e < B_SCALARS; ++e) {
                const int kb = t * BK + bRowS(e);
                bS[e] = kb < K ? bSrcS(e)[(size_t)kb * N] : 0.0f;
            }
            return;
        }
#pragma unroll
        for (int i = 0; i < A_QUADS; ++i) {
            const int k = t * BK + (i / A_PASSES_PER_CHUNK) * 8 + aCol;
            const float* a = aSrc[i % A_PASSES_PER_CHUNK] - aCol + k;
            aReg[i] = make_float4(k < K ? a[0] : 0.0f, k + 1 < K ? a[1] : 0.0f, k + 2 < K ? a[2] : 0.0f,
                                  k + 3 < K ? a[3] : 0.0f);
        }
#pragma unroll
        for (int i = 0; i < B_QUADS; ++i) {
            const int k = t * BK + bRow + i * B_ROWS_PER_PASS;
            const float* b = bSrc + (size_t)(k - bRow) * N;
            bReg[i] = k < K ? (VEC ? ld4<true>(b) : make_float4(b[0], b[bStep1], b[bStep2], b[bStep3]))
                            : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    };
    auto storeShared = [&](int stage) {
        if constexpr (MAPS) {
#pragma unroll
            for (int e = 0; e < A_SCALARS; ++e)  // transposed: As[k][m]
                As[stage][aK * AS_LD + tid / BK + e * A_S_ROWS] = aS[e];
#pragma unroll
            for (int e = 0; e < B_SCALARS; ++e)
                Bs[stage][bRowS(e) * BN + bColS(e)] = bS[e];
            return;
        }
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

    float acc[FM][FN] = {};
    const int aFrag = warpRow * WM + lRow * TM;  // fragment origins inside a stage
    const int bFrag = warpCol * WN + lCol * TN;
    // One k of the outer product: FM x FN FMAs from FM + FN values loaded as float4.
    auto step = [&](const float* as, const float* bs, int k) {
        float regM[FM], regN[FN];
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
#pragma unroll
        for (int m = 0; m < FM; ++m)
#pragma unroll
            for (int n = 0; n < FN; ++n)
                acc[m][n] += regM[m] * regN[n];
    };

    // Main loop over the full K-tiles, two shared-memory stages as in stage 08; each instance in the
    // form ptxas schedules best for it (below).
    if (tBegin < fullEnd) {
        loadFull(tBegin);
        storeShared(0);
        __syncthreads();
    }
    if constexpr (VEC && TOP_LOADS) {
        // Sources of the next full K-tile, advanced by a tile each round as in stage 08, and the loads
        // under a uniform branch: ptxas then issues them at the top of the round, ahead of the FMAs that
        // hide them, and keeps every fragment load well ahead of its FMAs (kernels/NOTES.md).
        const float* aN[A_PASSES_PER_CHUNK];
#pragma unroll
        for (int p = 0; p < A_PASSES_PER_CHUNK; ++p)
            aN[p] = aSrc[p] + (tBegin + 1) * BK;
        const float* bN = bSrc + (size_t)(tBegin + 1) * BK * N;
        for (int t = tBegin; t < fullEnd; ++t) {
            const int cur = (t - tBegin) & 1;
            const bool more = t + 1 < fullEnd;  // uniform across the block
            if (more) {
#pragma unroll
                for (int i = 0; i < A_QUADS; ++i)
                    aReg[i] = ld4<true>(aN[i % A_PASSES_PER_CHUNK] + (i / A_PASSES_PER_CHUNK) * 8);
#pragma unroll
                for (int i = 0; i < B_QUADS; ++i)
                    bReg[i] = ld4<true>(bN + (size_t)(i * B_ROWS_PER_PASS) * N);
#pragma unroll
                for (int p = 0; p < A_PASSES_PER_CHUNK; ++p)
                    aN[p] += BK;
                bN += (size_t)BK * N;
            }
#pragma unroll
            for (int k = 0; k < BK; ++k)
                step(&As[cur][aFrag], &Bs[cur][bFrag], k);
            if (more)
                storeShared(cur ^ 1);
            __syncthreads();  // the stores are visible, and nobody still reads stage `cur`
        }
    } else {
        // The 4-byte instance (and, with TOP_LOADS 0, the 16-byte one): the next tile is loaded
        // unconditionally (the last round reloads its own tile into the idle stage).
        for (int t = tBegin; t < fullEnd; ++t) {
            const int cur = (t - tBegin) & 1;
            loadFull(min(t + 1, fullEnd - 1));  // completes during the FMAs below
#pragma unroll
            for (int k = 0; k < BK; ++k)
                step(&As[cur][aFrag], &Bs[cur][bFrag], k);
            storeShared(cur ^ 1);
            __syncthreads();  // the stores are visible, and nobody still reads stage `cur`
        }
    }
    // The partial K-tile, if this split holds it: K % BK steps, loaded with checks.
    if (fullEnd < tEnd) {
        loadPartial(fullEnd);
        storeShared(0);
        __syncthreads();
#pragma unroll 1
        for (int k = 0; k < K - fullEnd * BK; ++k)
            step(&As[0][aFrag], &Bs[0][bFrag], k);
    }

    // Quad q of this thread = acc[m][n .. n+3] with m = q / (FN/4), n = 4 * (q % (FN/4)); it is
    // C(row0 + aFrag + (m / TM) * WSUBM + m % TM, col0 + bFrag + (n / TN) * WSUBN + n % TN, +0..3).
    const bool fastC = row0 + BM <= M && col0 + BN <= N && N % 4 == 0 && aligned16(C);
    auto quad = [&](int q) {
        const int m = q / (FN / 4), n = 4 * (q % (FN / 4));
        return make_float4(acc[m][n], acc[m][n + 1], acc[m][n + 2], acc[m][n + 3]);
    };
    auto rowOf = [&](int q) { return row0 + aFrag + (q / (FN / 4) / TM) * WSUBM + q / (FN / 4) % TM; };
    auto colOf = [&](int q) { return col0 + bFrag + (4 * (q % (FN / 4)) / TN) * WSUBN + 4 * (q % (FN / 4)) % TN; };
    // C's old values at quad q (zeros where beta == 0: C is then not read, and may hold NaN).
    auto loadOld = [&](int q) {
        const int r = rowOf(q), c = colOf(q);
        const float* p = C + (size_t)r * N + c;
        if (beta == 0.0f || (!fastC && r >= M))
            return make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (fastC)
            return *reinterpret_cast<const float4*>(p);
        return make_float4(c < N ? p[0] : 0.0f, c + 1 < N ? p[1] : 0.0f, c + 2 < N ? p[2] : 0.0f, c + 3 < N ? p[3] : 0.0f);
    };
    auto store = [&](int q, float4 v, float4 old) {
        const int r = rowOf(q), c = colOf(q);
        float* p = C + (size_t)r * N + c;
        const float4 out = beta == 0.0f ? make_float4(alpha * v.x, alpha * v.y, alpha * v.z, alpha * v.w)
                                        : make_float4(alpha * v.x + beta * old.x, alpha * v.y + beta * old.y,
                                                      alpha * v.z + beta * old.z, alpha * v.w + beta * old.w);
        if (fastC) {
            *reinterpret_cast<float4*>(p) = out;
        } else if (r < M) {
            if (c + 0 < N) p[0] = out.x;
            if (c + 1 < N) p[1] = out.y;
            if (c + 2 < N) p[2] = out.z;
            if (c + 3 < N) p[3] = out.w;
        }
    };
#if SPLIT_SLOTS > 0
    if (gridDim.z > 1) {
        // The S slices of this tile meet in a fixed binary tree over slice indices. A block holds the
        // sum of the span [lo, lo + 2^l); where the sibling span exists it counts itself in at their
        // node, whose midpoint m = parent + 2^l is unique to the node (so counter and flag m - 1 of the
        // tile's S - 1). The first of the two to arrive stores its sum at slot lo, raises the node's flag
        // and stops; the second waits for the flag (the first is running: it has counted in, and
        // nothing stops it from storing), adds the other's sum and climbs, without storing its own.
        // Whatever the order of arrival, every node adds the same two sums (a + b == b + a exactly), so
        // C never depends on timing.
        const int S = gridDim.z, z = blockIdx.z;
        auto slot = [&](int s) { return splitPartials + ((size_t)tile * S + s) * QUADS * THREADS + tid; };
        unsigned int* counters = splitArrivals + tile * S;
        __shared__ bool second;  // this block is the second of the two to reach the node
        int lo = z;
        for (int span = 1; span < S; span *= 2) {
            const int parent = lo & ~(2 * span - 1), sib = lo == parent ? parent + span : parent;
            if (parent + span >= S) {  // no sibling span at this level: climb alone
                lo = parent;
                continue;
            }
            __syncthreads();  // every thread has read `second` of the level below
            if (tid == 0) {
                unsigned int* count = &counters[parent + span - 1];
                second = atomicAdd(count, 1u) == 1u;
                if (second)
                    *count = 0;  // both have counted: ready for the next launch
            }
            __syncthreads();
            if (!second) {
                float4* mine = slot(lo);
#pragma unroll
                for (int q = 0; q < QUADS; ++q)
                    __stcg(mine + q * THREADS, quad(q));
                __threadfence();  // the sum is visible GPU-wide before the flag
                __syncthreads();
                if (tid == 0)
                    atomicExch(&counters[SPLIT_BLOCKS + parent + span - 1], 1u);
                return;
            }
            if (tid == 0) {
                unsigned int* ready = &counters[SPLIT_BLOCKS + parent + span - 1];
                while (atomicAdd(ready, 0u) == 0u) {
                }
                *ready = 0;  // seen: ready for the next launch
            }
            __syncthreads();
            __threadfence();  // order the reads of the sibling's sum after the flag
            const float4* other = slot(sib);
            // 8 quads in flight at a time: all of them at once would need a second accumulator set.
#pragma unroll
            for (int q0 = 0; q0 < QUADS; q0 += 8) {
                float4 v[8];
#pragma unroll
                for (int j = 0; j < 8; ++j)
                    if (q0 + j < QUADS)
                        v[j] = __ldcg(other + (q0 + j) * THREADS);
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    if (q0 + j < QUADS) {
                        const int m = (q0 + j) / (FN / 4), n = 4 * ((q0 + j) % (FN / 4));
                        acc[m][n] += v[j].x;
                        acc[m][n + 1] += v[j].y;
                        acc[m][n + 2] += v[j].z;
                        acc[m][n + 3] += v[j].w;
                    }
                }
            }
            lo = parent;
        }
        // The root: the sum of all S slices, in registers.
    }
#endif
    // C's old values for 8 quads loaded before any of their stores: a store may alias a later load as far
    // as the compiler knows (rows N floats apart), so in turn each load would wait out the store before it
    // and a tile would pay a trip to memory per quad (kernels/NOTES.md).
#pragma unroll
    for (int q0 = 0; q0 < QUADS; q0 += 8) {
        float4 old[8];
#pragma unroll
        for (int j = 0; j < 8; ++j)
            if (q0 + j < QUADS)
                old[j] = loadOld(q0 + j);
#pragma unroll
        for (int j = 0; j < 8; ++j)
            if (q0 + j < QUADS)
                store(q0 + j, quad(q0 + j), old[j]);
    }
}

// The 4-byte instance, kept out of line: inlined beside the 16-byte one, it shares the kernel's
// register allocation and ptxas schedules the 16-byte main loop worse (fragment loads issued just
// before their FMAs, the next tile's global loads sunk to the end of the round).
__device__ __noinline__ void gemmBlockScalar(int M, int N, int K, float alpha, const float* __restrict__ A,
                                             const float* __restrict__ B, float beta, float* __restrict__ C,
                                             float (&As)[2][BK * AS_LD], float (&Bs)[2][BK * BN]) {
    gemmBlock<false>(M, N, K, alpha, A, B, beta, C, As, Bs);
}

extern "C" __global__ void __launch_bounds__(THREADS, MINBLOCKS)
sgemm_general(int M, int N, int K, float alpha, const float* __restrict__ A,
              const float* __restrict__ B, float beta, float* __restrict__ C) {
    __shared__ __align__(16) float As[2][BK * AS_LD];  // [stage][k][m], transposed and padded
    __shared__ __align__(16) float Bs[2][BK * BN];     // [stage][k][n]
    if (K % 4 == 0 && N % 4 == 0 && aligned16(A) && aligned16(B))
        gemmBlock<true>(M, N, K, alpha, A, B, beta, C, As, Bs);
    else if (TOP_LOADS)
        gemmBlockScalar(M, N, K, alpha, A, B, beta, C, As, Bs);
    else
        gemmBlock<false>(M, N, K, alpha, A, B, beta, C, As, Bs);
}
