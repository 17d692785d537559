// Stage 13 - stage 11 as the base of the fused epilogue: D = act(alpha * A @ B + beta * C + bias)
// for any M, N, K and leading dimensions, with stage 11's tiling, clamped loads and split-K. Stage 07
// did this with scalar loads at 0.65x of cuBLASLt; this stage keeps the float4 path wherever the
// rows allow it.
//
// What changes against stage 11:
// - Leading dimensions. Row r of A starts at A + r * lda, of B at B + r * ldb; C is read at ldc and
//   the result written to D at ldd. A and B take the float4 loop when lda, ldb and N are multiples
//   of 4 and both base pointers are 16-byte aligned (N too, because the clamped last 4 columns of B
//   start at N - 4); otherwise the 4-byte instance, as in stage 11.
// - The epilogue: alpha scales the product only; beta * C is added (C not read when beta = 0, so a
//   C full of NaN is harmless), then the bias of the column (bias may be nullptr), then ACT (0 none,
//   1 ReLU, 2 GELU in its tanh form). D may be C itself (same pointer and leading dimension): every
//   element of C is read by the thread that then writes it, before it writes it. Interior tiles
//   with 16-byte aligned rows of C and D read and write float4.
// - Split-K is unchanged: the last block of a tile sums the partials in slice order and applies
//   the whole epilogue once.

#include "common.cuh"

#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef BK
#define BK 16
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
#ifndef GROUP_M
#define GROUP_M 8
#endif
#ifndef ACT
#define ACT 0
#endif
#ifndef TOP_LOADS
// 1: the 16-byte main loop in stage 08's form (next tile's loads at the top of the round, under a
// uniform branch) and the 4-byte instance out of line, as stage 11 at its 128 x 128 tile; 0: both
// instances inline, the next tile loaded unconditionally.
#define TOP_LOADS 1
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
static_assert(SPLIT_SLOTS >= 0 && GROUP_M >= 1, "SPLIT_SLOTS >= 0 (0: no split-K) and GROUP_M >= 1");
static_assert(ACT >= 0 && ACT <= 2, "ACT is 0 (none), 1 (ReLU) or 2 (GELU, tanh approximation)");

#if SPLIT_SLOTS > 0
// Split-K scratch: one partial tile per block of a split launch, in the thread-private order
// [block][quad][thread] (every store and load coalesced), and one arrival counter per tile.
__device__ float4 splitPartials[SPLIT_SLOTS * QUADS * THREADS];
__device__ unsigned int splitArrivals[SPLIT_SLOTS];
#endif

// The whole block: main loop, partial K-tile, epilogue (and split-K reduction). VEC: A and B are
// read with 16-byte loads (lda, ldb and N multiples of 4, base pointers 16-byte aligned).
template <bool VEC>
__device__ __forceinline__ void gemmBlock(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
                                          const float* __restrict__ B, int ldb, float beta, const float* C,
                                          int ldc, const float* __restrict__ bias, float* D, int ldd,
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
        aSrc[p] = A + (size_t)min(row0 + aRow + p * A_ROWS_PER_PASS, M - 1) * lda + aCol;
    const int bColC = VEC ? min(col0 + bCol, N - 4) : min(col0 + bCol, N - 1);
    const float* bSrc = B + (size_t)bRow * ldb + bColC;
    // Scalar B: the 4 columns are clamped one by one (they need not be consecutive at the edge).
    const int bStep1 = min(col0 + bCol + 1, N - 1) - bColC, bStep2 = min(col0 + bCol + 2, N - 1) - bColC,
              bStep3 = min(col0 + bCol + 3, N - 1) - bColC;

    float4 aReg[A_QUADS], bReg[B_QUADS];  // the next tile, in flight between global and shared
    auto loadFull = [&](int t) {  // K-tile t < kFull: every address is inside the matrix
#pragma unroll
        for (int i = 0; i < A_QUADS; ++i)
            aReg[i] = ld4<VEC>(aSrc[i % A_PASSES_PER_CHUNK] + t * BK + (i / A_PASSES_PER_CHUNK) * 8);
#pragma unroll
        for (int i = 0; i < B_QUADS; ++i) {
            const float* b = bSrc + (size_t)(t * BK + i * B_ROWS_PER_PASS) * ldb;
            bReg[i] = VEC ? ld4<true>(b) : make_float4(__ldg(b), __ldg(b + bStep1), __ldg(b + bStep2), __ldg(b + bStep3));
        }
    };
    auto loadPartial = [&](int t) {  // the partial K-tile: zeros past K
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
            const float* b = bSrc + (size_t)(k - bRow) * ldb;
            bReg[i] = k < K ? (VEC ? ld4<true>(b) : make_float4(b[0], b[bStep1], b[bStep2], b[bStep3]))
                            : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
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
    // form ptxas schedules best for it (stage 11's measurement, kernels/NOTES.md).
    if (tBegin < fullEnd) {
        loadFull(tBegin);
        storeShared(0);
        __syncthreads();
    }
    if constexpr (VEC && TOP_LOADS) {
        // Sources of the next full K-tile, advanced by a tile each round, and the loads under a uniform
        // branch: ptxas issues them at the top of the round, ahead of the FMAs that hide them.
        const float* aN[A_PASSES_PER_CHUNK];
#pragma unroll
        for (int p = 0; p < A_PASSES_PER_CHUNK; ++p)
            aN[p] = aSrc[p] + (tBegin + 1) * BK;
        const float* bN = bSrc + (size_t)(tBegin + 1) * BK * ldb;
        for (int t = tBegin; t < fullEnd; ++t) {
            const int cur = (t - tBegin) & 1;
            const bool more = t + 1 < fullEnd;  // uniform across the block
            if (more) {
#pragma unroll
                for (int i = 0; i < A_QUADS; ++i)
                    aReg[i] = ld4<true>(aN[i % A_PASSES_PER_CHUNK] + (i / A_PASSES_PER_CHUNK) * 8);
#pragma unroll
                for (int i = 0; i < B_QUADS; ++i)
                    bReg[i] = ld4<true>(bN + (size_t)(i * B_ROWS_PER_PASS) * ldb);
#pragma unroll
                for (int p = 0; p < A_PASSES_PER_CHUNK; ++p)
                    aN[p] += BK;
                bN += (size_t)BK * ldb;
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
    // D(row0 + aFrag + (m / TM) * WSUBM + m % TM, col0 + bFrag + (n / TN) * WSUBN + n % TN, +0..3).
    const bool fastD = row0 + BM <= M && col0 + BN <= N && ldc % 4 == 0 && ldd % 4 == 0 && aligned16(C) &&
                       aligned16(D);
    auto quad = [&](int q) {
        const int m = q / (FN / 4), n = 4 * (q % (FN / 4));
        return make_float4(acc[m][n], acc[m][n + 1], acc[m][n + 2], acc[m][n + 3]);
    };
    auto rowOf = [&](int q) { return row0 + aFrag + (q / (FN / 4) / TM) * WSUBM + q / (FN / 4) % TM; };
    auto colOf = [&](int q) { return col0 + bFrag + (4 * (q % (FN / 4)) / TN) * WSUBN + 4 * (q % (FN / 4)) % TN; };
    // C's old values at quad q: zeros where beta == 0 (C is then not read, and may hold NaN) or outside.
    auto loadOld = [&](int q) {
        const int r = rowOf(q), c = colOf(q);
        const float* pc = C + (size_t)r * ldc + c;
        if (beta == 0.0f || (!fastD && r >= M))
            return make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (fastD)
            return *reinterpret_cast<const float4*>(pc);
        return make_float4(c < N ? pc[0] : 0.0f, c + 1 < N ? pc[1] : 0.0f, c + 2 < N ? pc[2] : 0.0f,
                           c + 3 < N ? pc[3] : 0.0f);
    };
    // One result: act(alpha * v + beta * old + bias).
    auto finish = [&](float v, float old, int col) {
        float x = alpha * v;
        if (beta != 0.0f)
            x += beta * old;
        if (bias != nullptr)
            x += __ldg(bias + col);
        return activate<ACT>(x);
    };
    auto store = [&](int q, float4 v, float4 old) {
        const int r = rowOf(q), c = colOf(q);
        float* pd = D + (size_t)r * ldd + c;
        if (fastD) {
            float4 x = make_float4(alpha * v.x + beta * old.x, alpha * v.y + beta * old.y, alpha * v.z + beta * old.z,
                                   alpha * v.w + beta * old.w);
            if (bias != nullptr) {
                x.x += __ldg(bias + c + 0);
                x.y += __ldg(bias + c + 1);
                x.z += __ldg(bias + c + 2);
                x.w += __ldg(bias + c + 3);
            }
            *reinterpret_cast<float4*>(pd) =
                make_float4(activate<ACT>(x.x), activate<ACT>(x.y), activate<ACT>(x.z), activate<ACT>(x.w));
        } else if (r < M) {
            if (c + 0 < N) pd[0] = finish(v.x, old.x, c + 0);
            if (c + 1 < N) pd[1] = finish(v.y, old.y, c + 1);
            if (c + 2 < N) pd[2] = finish(v.z, old.z, c + 2);
            if (c + 3 < N) pd[3] = finish(v.w, old.w, c + 3);
        }
    };
    // The stores of 8 quads after the loads of their C (a store may alias a later load as far as the
    // compiler knows, so in turn each load would wait out the store before it: stage 11, kernels/NOTES.md).
    // D may be C: each element's old value is still read before it is written.
    auto store8 = [&](int q0, const float4 (&v)[8]) {
        float4 old[8];
#pragma unroll
        for (int j = 0; j < 8; ++j)
            if (q0 + j < QUADS)
                old[j] = loadOld(q0 + j);
#pragma unroll
        for (int j = 0; j < 8; ++j)
            if (q0 + j < QUADS)
                store(q0 + j, v[j], old[j]);
    };
#if SPLIT_SLOTS > 0
    if (gridDim.z > 1) {
        // The launch plan keeps tilesM * tilesN * gridDim.z <= SPLIT_SLOTS; anything else would
        // overrun the workspace, so stop loudly.
        if (tilesM * tilesN * (int)gridDim.z > SPLIT_SLOTS)
            __trap();
        const int S = gridDim.z, z = blockIdx.z;
        float4* mine = splitPartials + (size_t)(tile * S + z) * QUADS * THREADS + tid;
#pragma unroll
        for (int q = 0; q < QUADS; ++q)
            __stcg(mine + q * THREADS, quad(q));
        __threadfence();  // the partial is visible GPU-wide before this block counts itself in
        __shared__ bool last;  // this block arrived last for its tile
        __syncthreads();
        if (tid == 0) {
            last = atomicAdd(&splitArrivals[tile], 1u) == (unsigned)(S - 1);
            if (last)
                splitArrivals[tile] = 0;  // every block of this tile has counted: ready for the next launch
        }
        __syncthreads();
        if (!last)
            return;
        __threadfence();  // order the reads of the other partials after the count
        const float4* parts = splitPartials + (size_t)tile * S * QUADS * THREADS + tid;
        // Sum the S partials in slice order. The own partial is read back like the others, which
        // frees the accumulator registers for loads: 8 quads at a time, 4 slices per round trip.
#pragma unroll
        for (int q0 = 0; q0 < QUADS; q0 += 8) {
            float4 sum[8];
#pragma unroll
            for (int j = 0; j < 8; ++j)
                sum[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 4
            for (int s = 0; s < S; ++s) {
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    if (q0 + j < QUADS) {
                        const float4 v = __ldcg(parts + ((size_t)s * QUADS + q0 + j) * THREADS);
                        sum[j].x += v.x;
                        sum[j].y += v.y;
                        sum[j].z += v.z;
                        sum[j].w += v.w;
                    }
                }
            }
            store8(q0, sum);
        }
        return;
    }
#endif
#pragma unroll
    for (int q0 = 0; q0 < QUADS; q0 += 8) {
        float4 v[8];
#pragma unroll
        for (int j = 0; j < 8; ++j)
            if (q0 + j < QUADS)
                v[j] = quad(q0 + j);
        store8(q0, v);
    }
}

// The 4-byte instance, kept out of line: inlined beside the 16-byte one it shares the kernel's register
// allocation, and ptxas schedules the 16-byte main loop worse (stage 11's measurement).
__device__ __noinline__ void gemmBlockScalar(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
                                             const float* __restrict__ B, int ldb, float beta, const float* C,
                                             int ldc, const float* __restrict__ bias, float* D, int ldd,
                                             float (&As)[2][BK * AS_LD], float (&Bs)[2][BK * BN]) {
    gemmBlock<false>(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias, D, ldd, As, Bs);
}

extern "C" __global__ void __launch_bounds__(THREADS, MINBLOCKS)
sgemm_fused_general(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
                    const float* __restrict__ B, int ldb, float beta, const float* C, int ldc,
                    const float* __restrict__ bias, float* D, int ldd) {
    __shared__ __align__(16) float As[2][BK * AS_LD];  // [stage][k][m], transposed and padded
    __shared__ __align__(16) float Bs[2][BK * BN];     // [stage][k][n]
    if (lda % 4 == 0 && ldb % 4 == 0 && N % 4 == 0 && aligned16(A) && aligned16(B))
        gemmBlock<true>(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias, D, ldd, As, Bs);
    else if (TOP_LOADS)
        gemmBlockScalar(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias, D, ldd, As, Bs);
    else
        gemmBlock<false>(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias, D, ldd, As, Bs);
}
