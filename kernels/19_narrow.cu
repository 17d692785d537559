// Stage 19 - narrow outputs (N <= BN, e.g. 8192 x 12 x 6144): a GEMV-like, memory-bound path in
// strict FP32 on the CUDA cores.
//
// With N = 12, each value of A serves 12 FMAs and is never needed again: the product is a stream
// over A (M*K*4 bytes) at 6 flops per byte, and DRAM, not arithmetic, sets its speed. A tiled GEMM
// still runs it as 128 x 128 tiles, 91% of whose columns lie past N. This kernel instead:
// - Reads A once, coalesced, straight into registers. A block owns BM rows of C (all N columns)
//   and one K-slice; warp w owns rows w*R .. w*R + R-1 (R = BM / warps), and lane l the columns
//   k = k0 + 32*j + l (j < BK/32) of each K-step of BK: every warp load is one 128-byte line of a
//   row of A, and every sector fetched from DRAM is used whole.
// - Keeps B in shared memory, one K-step (BK x NB) at a time, for all the block's warps: a lane
//   reads the NB values of its k (NB/4 LDS.128) and uses them for its R rows (R*NB FMAs). The rows
//   are LD floats apart, LD = 4 mod 8, so 8 lanes on 8 consecutive k hit 8 different bank quads: no
//   conflicts. Columns past N and rows past K hold zeros.
// - Does no FMAs on columns past N that it can avoid: the body is compiled for NB = 1, 2, 4, 8, 12
//   and 16 columns (up to BN) and the entry takes the narrowest NB >= N. A GEMV (N = 1) then issues
//   one FMA per value of A, not 16.
// - Prefetches: the next K-step's A (into registers) and B (into registers, then into the other
//   shared buffer) are requested before the current step's FMAs: one barrier per K-step.
// - Sums across the 32 lanes once, at the end of the slice, by a butterfly that halves the values
//   each lane holds at every level (a reduce-scatter: 62 shuffles for 64 values, not 320), so that
//   each lane ends with R*BN/32 of the warp's results.
// - Split-K for shapes with few row blocks, or (SPLIT_WAVES > 1) whose blocks leave the last wave
//   ragged (the launch plan, geometry: SPLIT_SLOTS, SPLIT_WAVES): every slice stores its partial tile,
//   and the last block of a tile to arrive adds the partials in slice order 0..S-1 (deterministic, no
//   floating-point atomics; no block waits for another, so the slices may run in different waves).
// Any M, any K (no alignment needed: A and B are read with 4-byte loads, coalesced), N <= BN.
//
// Narrow on the other side (NARROW_ROWS = 1; M <= BN < N, e.g. 12 x 6144 x 10240: y^T = x^T B): now B is
// the stream (K*N*4 bytes at M/2 flops per byte) and A the few rows every value of B meets. The launch
// plan tiles the transpose for these shapes (grid y over groups of BM columns, x = 1), and rowsBlock:
// - Reads B once, coalesced, straight into registers: lane l owns the columns c0 + 32*j + l
//   (j < BM/32) and warp w the rows k0 + w*KPW .. + KPW-1 of each K-step (KPW = BK / warps), so that
//   every warp load is one 128-byte piece of a row of B.
// - Keeps A's K-step (MB x BK) in shared memory k-major (As[k][m], rows of pitch(MB) floats): the 32
//   lanes of a warp read the same k, a broadcast, MB/4 LDS.128 for MB*BM/32 FMAs.
// - Sums the warps' partials of each output through shared memory at the end of the slice (the warps
//   took different k), in warp order; split-K over blocks as the column path does.
// The body is compiled for MB = 1, 2, 4, 8, 12 and 16 rows; the entry takes the narrowest MB >= M.

#include "common.cuh"

#ifndef BM
#define BM 32
#endif
#ifndef BN
#define BN 16
#endif
#ifndef BK
#define BK 128
#endif
#ifndef THREADS
#define THREADS 256
#endif
#ifndef MINBLOCKS
#define MINBLOCKS 2
#endif
#ifndef SPLIT_SLOTS
#define SPLIT_SLOTS 264  // blocks resident at once; the split-K workspace holds SPLIT_WAVES waves of them
#endif
#ifndef SPLIT_WAVES
#define SPLIT_WAVES 1  // > 1: the plan may split outputs of more tiles than one wave (launch plan: tiles * splits <= SPLIT_SLOTS * SPLIT_WAVES)
#endif
#ifndef NARROW_ROWS
#define NARROW_ROWS 0  // 1: outputs of M <= BN rows (and N > BN) run too, their transpose tiled (rowsBlock); 0 as the launch plan assumes when unset
#endif

constexpr int NWARPS = THREADS / 32;
constexpr int R = BM / NWARPS;  // rows of C per warp
constexpr int KPL = BK / 32;    // k per lane per K-step

// Row pitch of B's K-step in shared memory for NB columns: 1 and 2 need none (LDS.32 / LDS.64 of
// consecutive rows are conflict-free); wider rows are read as float4 and padded to 4 mod 8 floats.
__host__ __device__ constexpr int pitch(int nb) { return nb < 4 ? nb : ((nb / 4) % 2 == 1 ? nb : nb + 4); }
// Values a lane holds after the butterfly below: V halved once per offset while it is even.
__host__ __device__ constexpr int heldAfter(int v, int levels) { return levels == 0 || v % 2 ? v : heldAfter(v / 2, levels - 1); }

static_assert(THREADS % 32 == 0 && BM % NWARPS == 0 && R >= 1, "BM must be a whole number of rows per warp");
static_assert(BK % 32 == 0, "BK must be a multiple of 32 (one k per lane per pass)");
static_assert(BN == 4 || BN == 8 || BN == 16, "BN must be 4, 8 or 16");
static_assert(2 * BK * pitch(BN) * 4 <= 48 * 1024, "static shared memory is limited to 48 KB");
static_assert(SPLIT_SLOTS >= 0 && SPLIT_WAVES >= 1, "SPLIT_SLOTS >= 0 (0: no split-K), SPLIT_WAVES >= 1");
constexpr int SPLIT_BLOCKS = SPLIT_SLOTS * SPLIT_WAVES;  // blocks of a split launch the workspace holds
static_assert(NARROW_ROWS == 0 || NARROW_ROWS == 1, "NARROW_ROWS: 0 or 1");
static_assert(!NARROW_ROWS || (BM % 32 == 0 && BK % NWARPS == 0), "rows path: BM a multiple of 32 columns, BK of the warps");
static_assert(!NARROW_ROWS || NWARPS * BN * BM <= 2 * BK * pitch(BN), "rows path: the warps' partials fit in B's shared buffers");

#if SPLIT_SLOTS > 0
// Split-K scratch: one partial tile (BM x NB) per block of a split launch, and one arrival counter per tile.
__device__ float splitPartials[SPLIT_BLOCKS * BM * BN];
__device__ unsigned int splitArrivals[SPLIT_BLOCKS];
#endif

// Butterfly reduce-scatter over the 32 lanes of a warp, one level per offset O = 16, 8, ..., 1: while
// a lane holds an even number C of values, it keeps one half (the upper if bit O of its lane is set),
// sends the other half to lane ^ O and adds what it receives; value i is then the warp's result
// idx + i (idx: the offsets of the halves it kept). Once C is odd, the remaining offsets sum the C
// values fully, and only the lanes whose bits at those offsets are clear own (store) them. 64 values
// take 62 shuffles this way instead of 320. Compile-time recursion keeps every index constant, so the
// values stay in registers.
template <int V, int C, int O>
__device__ __forceinline__ void butterfly(float (&v)[V], int lane, int& idx, bool& owner) {
    if constexpr (O >= 1) {
        const bool hi = (lane & O) != 0;
        if constexpr (C % 2 == 0) {
#pragma unroll
            for (int i = 0; i < C / 2; ++i) {
                const float send = hi ? v[i] : v[i + C / 2];
                const float keep = hi ? v[i + C / 2] : v[i];
                v[i] = keep + __shfl_xor_sync(0xffffffffu, send, O);
            }
            idx += hi ? C / 2 : 0;
            butterfly<V, C / 2, O / 2>(v, lane, idx, owner);
        } else {
#pragma unroll
            for (int i = 0; i < C; ++i)
                v[i] += __shfl_xor_sync(0xffffffffu, v[i], O);
            owner = owner && !hi;
            butterfly<V, C, O / 2>(v, lane, idx, owner);
        }
    }
}

#if SPLIT_SLOTS > 0
// Split-K, after this block (slice z of S) has stored its partial tile of TILE <= BM * BN floats at
// splitSlot<TILE>(tile, S, z): the last block of the tile to arrive adds the S partials in slice order
// 0..S-1 and calls store(local, sum) for each of the TILE outputs (deterministic: no floating-point atomics).
template <int TILE>
__device__ __forceinline__ float* splitSlot(int tile, int S, int z) {
    static_assert(TILE <= BM * BN, "a partial tile fits its slot");
    // The launch plan keeps tiles * S <= SPLIT_BLOCKS; anything else would overrun the workspace.
    if ((int)gridDim.y * S > SPLIT_BLOCKS)
        __trap();
    return splitPartials + (size_t)(tile * S + z) * TILE;
}
template <int TILE, class Store>
__device__ __forceinline__ void splitSum(int tile, int S, Store store) {
    __threadfence();  // the partial is visible GPU-wide before this block counts itself in
    __shared__ bool last;
    __syncthreads();
    if (threadIdx.x == 0) {
        last = atomicAdd(&splitArrivals[tile], 1u) == (unsigned)(S - 1);
        if (last)
            splitArrivals[tile] = 0;  // every block of this tile has counted: ready for the next launch
    }
    __syncthreads();
    if (!last)
        return;
    __threadfence();  // order the reads of the other partials after the count
    const float* parts = splitPartials + (size_t)tile * S * TILE;
    for (int e = threadIdx.x; e < TILE; e += THREADS) {
        float sum = 0.0f;
#pragma unroll 8
        for (int s = 0; s < S; ++s)
            sum += __ldcg(parts + (size_t)s * TILE + e);
        store(e, sum);
    }
}
#endif

// The whole block for outputs of N <= NB columns.
template <int NB>
__device__ __forceinline__ void narrowBlock(int M, int N, int K, float alpha, const float* __restrict__ A,
                                            const float* __restrict__ B, float beta, float* __restrict__ C,
                                            float* __restrict__ Bs) {
    constexpr int LD = pitch(NB);
    constexpr int V = R * NB;                                // a lane's partial results (the warp's results)
    constexpr int HELD = heldAfter(V, 5);                    // ... of which a lane stores after the butterfly
    constexpr int TILE = BM * NB;                            // a block's results (split-K partial)
    constexpr int B_PER_THREAD = (BK * NB + THREADS - 1) / THREADS;  // B values a thread copies per K-step
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

    // This block's K-steps: slice z of S, as the launch plan cut them (equal counts, none empty).
    const int S = gridDim.z, z = blockIdx.z;
    const int kSteps = (K + BK - 1) / BK, perSlice = (kSteps + S - 1) / S;
    const int tBegin = z * perSlice, tEnd = min(kSteps, tBegin + perSlice);

    // Rows of this warp; rows past M read row M-1 (their results are never stored).
    const int row0 = blockIdx.y * BM + warp * R;
    const float* aRow[R];
#pragma unroll
    for (int r = 0; r < R; ++r)
        aRow[r] = A + (size_t)min(row0 + r, M - 1) * K + lane;

    // B's K-step is BK*N consecutive floats of global memory (rows of N): thread tid copies elements
    // e = tid + i*THREADS to row e / N, column e % N of the shared tile. Offsets computed once.
    int bOff[B_PER_THREAD];
#pragma unroll
    for (int i = 0; i < B_PER_THREAD; ++i) {
        const int e = tid + i * THREADS;
        bOff[i] = e < BK * N ? (e / N) * LD + e % N : -1;
    }
    // Columns N..NB-1 (and the row padding) are never written by the copy: zero them once.
    for (int i = tid; i < 2 * BK * LD; i += THREADS)
        Bs[i] = 0.0f;

    float a[R][KPL], bReg[B_PER_THREAD];
    auto loadA = [&](int t) {  // k beyond K reads as 0 (its B row is 0 too)
        const int kLeft = K - t * BK - lane;
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int j = 0; j < KPL; ++j)
                a[r][j] = 32 * j < kLeft ? __ldg(aRow[r] + (size_t)t * BK + 32 * j) : 0.0f;
    };
    auto loadB = [&](int t) {
        const float* src = B + (size_t)t * BK * N;
        const int valid = (K - t * BK) * N;  // elements of this K-step inside B (may exceed BK*N)
#pragma unroll
        for (int i = 0; i < B_PER_THREAD; ++i) {
            const int e = tid + i * THREADS;
            bReg[i] = bOff[i] >= 0 && e < valid ? __ldg(src + e) : 0.0f;
        }
    };
    auto storeB = [&](int buf) {
#pragma unroll
        for (int i = 0; i < B_PER_THREAD; ++i)
            if (bOff[i] >= 0)
                Bs[buf * BK * LD + bOff[i]] = bReg[i];
    };

    float acc[V];  // acc[r * NB + n]: this lane's part of row r, column n
#pragma unroll
    for (int i = 0; i < V; ++i)
        acc[i] = 0.0f;

    __syncthreads();  // the zeros are in place before the first copy lands on them
    loadA(tBegin);
    loadB(tBegin);
    storeB(0);
    __syncthreads();
    int buf = 0;
    for (int t = tBegin; t < tEnd; ++t) {
        float aNow[R][KPL];
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int j = 0; j < KPL; ++j)
                aNow[r][j] = a[r][j];
        // The next K-step's loads, in flight during this step's FMAs. Unconditional (the last step
        // reloads its own, and does not store it): under an `if`, ptxas sank them below the FMAs, to
        // just before the shared stores, so that every K-step waited out a whole DRAM latency.
        const bool more = t + 1 < tEnd;
        loadA(min(t + 1, tEnd - 1));
        loadB(min(t + 1, tEnd - 1));
#pragma unroll
        for (int j = 0; j < KPL; ++j) {
            const float* bRow = Bs + buf * BK * LD + (32 * j + lane) * LD;
            float b[NB];
            if constexpr (NB == 1) {
                b[0] = bRow[0];
            } else if constexpr (NB == 2) {
                const float2 v = *reinterpret_cast<const float2*>(bRow);
                b[0] = v.x, b[1] = v.y;
            } else {
#pragma unroll
                for (int q = 0; q < NB / 4; ++q) {
                    const float4 v = *reinterpret_cast<const float4*>(bRow + 4 * q);
                    b[4 * q] = v.x, b[4 * q + 1] = v.y, b[4 * q + 2] = v.z, b[4 * q + 3] = v.w;
                }
            }
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int n = 0; n < NB; ++n)
                    acc[r * NB + n] = fmaf(aNow[r][j], b[n], acc[r * NB + n]);
        }
        if (more)
            storeB(buf ^ 1);  // the other buffer was last read in step t-1, before the barrier below
        __syncthreads();
        buf ^= 1;
    }

    // Sum across the lanes; a lane holds results idx .. idx + HELD - 1 of its warp.
    int idx = 0;
    bool owner = true;
    butterfly<V, V, 16>(acc, lane, idx, owner);

    const int blockRow0 = blockIdx.y * BM;
    auto store = [&](int local, float sum) {  // local: r * NB + n within the block's tile
        const int r = blockRow0 + local / NB, n = local % NB;
        if (r < M && n < N) {
            float* p = C + (size_t)r * N + n;
            *p = epilogue(alpha, sum, beta, p);
        }
    };
#if SPLIT_SLOTS > 0
    if (S > 1) {  // partials in the tile's order (local = r * NB + n)
        float* mine = splitSlot<TILE>(blockIdx.y, S, z) + warp * V;
        if (owner)
#pragma unroll
            for (int i = 0; i < HELD; ++i)
                __stcg(mine + idx + i, acc[i]);
        splitSum<TILE>(blockIdx.y, S, store);
        return;
    }
#endif
    if (owner)
#pragma unroll
        for (int i = 0; i < HELD; ++i)
            store(warp * V + idx + i, acc[i]);
}

// The whole block for outputs of M <= MB rows and N > BN columns: columns blockIdx.y * BM .. + BM-1 of
// all M rows, over K-slice blockIdx.z (the launch plan tiles the transpose: grid x is 1).
template <int MB>
__device__ __forceinline__ void rowsBlock(int M, int N, int K, float alpha, const float* __restrict__ A,
                                          const float* __restrict__ B, float beta, float* __restrict__ C,
                                          float* __restrict__ smem) {
    constexpr int LD = pitch(MB);                                    // As[k * LD + m]: A's K-step, k-major
    constexpr int CPL = BM / 32;                                     // columns of C per lane
    constexpr int KPW = BK / NWARPS;                                 // rows of B per warp per K-step
    constexpr int A_PER_THREAD = (MB * BK + THREADS - 1) / THREADS;  // A values a thread copies per K-step
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

    const int S = gridDim.z, z = blockIdx.z;
    const int kSteps = (K + BK - 1) / BK, perSlice = (kSteps + S - 1) / S;
    const int tBegin = z * perSlice, tEnd = min(kSteps, tBegin + perSlice);

    // This lane's columns; a column past N reads column N-1 (its results are never stored).
    const int col0 = blockIdx.y * BM;
    const float* bCol[CPL];
#pragma unroll
    for (int j = 0; j < CPL; ++j)
        bCol[j] = B + min(col0 + 32 * j + lane, N - 1);

    float b[KPW][CPL], aReg[A_PER_THREAD];
    auto loadB = [&](int t) {  // rows past K read as 0
        const int k0 = t * BK + warp * KPW, rows = K - k0;
#pragma unroll
        for (int j = 0; j < CPL; ++j) {
            const float* p = bCol[j] + (size_t)k0 * N;  // walked down the column: one add a load
#pragma unroll
            for (int i = 0; i < KPW; ++i, p += N)
                b[i][j] = i < rows ? __ldg(p) : 0.0f;
        }
    };
    // A's K-step, element e = m * BK + kk (coalesced along a row of A); rows past M and k past K read as 0,
    // so every element of the MB x BK step is written each time.
    auto loadA = [&](int t) {
#pragma unroll
        for (int i = 0; i < A_PER_THREAD; ++i) {
            const int e = tid + i * THREADS, m = e / BK, k = t * BK + e % BK;
            aReg[i] = m < M && k < K ? __ldg(A + (size_t)m * K + k) : 0.0f;
        }
    };
    auto storeA = [&](int buf) {
#pragma unroll
        for (int i = 0; i < A_PER_THREAD; ++i) {
            const int e = tid + i * THREADS;
            if (e < MB * BK)
                smem[buf * BK * LD + (e % BK) * LD + e / BK] = aReg[i];
        }
    };

    float acc[MB][CPL];
#pragma unroll
    for (int m = 0; m < MB; ++m)
#pragma unroll
        for (int j = 0; j < CPL; ++j)
            acc[m][j] = 0.0f;

    loadA(tBegin);
    loadB(tBegin);
    storeA(0);
    __syncthreads();
    int buf = 0;
    for (int t = tBegin; t < tEnd; ++t) {
        float bNow[KPW][CPL];
#pragma unroll
        for (int i = 0; i < KPW; ++i)
#pragma unroll
            for (int j = 0; j < CPL; ++j)
                bNow[i][j] = b[i][j];
        // The next K-step's loads, in flight during this step's FMAs (unconditional, as in narrowBlock).
        const bool more = t + 1 < tEnd;
        loadA(min(t + 1, tEnd - 1));
        loadB(min(t + 1, tEnd - 1));
#pragma unroll
        for (int i = 0; i < KPW; ++i) {
            const float* aRow = smem + buf * BK * LD + (warp * KPW + i) * LD;  // one k: a broadcast
            float a[MB];
            if constexpr (MB == 1) {
                a[0] = aRow[0];
            } else if constexpr (MB == 2) {
                const float2 v = *reinterpret_cast<const float2*>(aRow);
                a[0] = v.x, a[1] = v.y;
            } else {
#pragma unroll
                for (int q = 0; q < MB / 4; ++q) {
                    const float4 v = *reinterpret_cast<const float4*>(aRow + 4 * q);
                    a[4 * q] = v.x, a[4 * q + 1] = v.y, a[4 * q + 2] = v.z, a[4 * q + 3] = v.w;
                }
            }
#pragma unroll
            for (int m = 0; m < MB; ++m)
#pragma unroll
                for (int j = 0; j < CPL; ++j)
                    acc[m][j] = fmaf(a[m], bNow[i][j], acc[m][j]);
        }
        if (more)
            storeA(buf ^ 1);  // the other buffer was last read in step t-1, before the barrier below
        __syncthreads();
        buf ^= 1;
    }

    // The warps' partials (each over its own rows of every K-step), summed in warp order: red[w][m][c].
    // The loop's last barrier is behind every read of A's buffers, which these stores reuse.
    float* red = smem;
#pragma unroll
    for (int m = 0; m < MB; ++m)
#pragma unroll
        for (int j = 0; j < CPL; ++j)
            red[(warp * MB + m) * BM + 32 * j + lane] = acc[m][j];
    __syncthreads();
    auto store = [&](int local, float sum) {  // local = m * BM + c within the block's tile
        const int m = local / BM, n = col0 + local % BM;
        if (m < M && n < N) {
            float* p = C + (size_t)m * N + n;
            *p = epilogue(alpha, sum, beta, p);
        }
    };
#if SPLIT_SLOTS > 0
    float* mine = S > 1 ? splitSlot<MB * BM>(blockIdx.y, S, z) : nullptr;
#endif
    for (int e = tid; e < MB * BM; e += THREADS) {
        float sum = 0.0f;
#pragma unroll
        for (int w = 0; w < NWARPS; ++w)
            sum += red[w * MB * BM + e];
#if SPLIT_SLOTS > 0
        if (S > 1) {
            __stcg(mine + e, sum);
            continue;
        }
#endif
        store(e, sum);
    }
#if SPLIT_SLOTS > 0
    if (S > 1)
        splitSum<MB * BM>(blockIdx.y, S, store);
#endif
}

// Runs run(Width<W>{}) for the narrowest W of 1, 2, 4, 8, 12 and 16 (up to BN) that holds n.
template <int W>
struct Width {
    static constexpr int value = W;
};
template <class Run>
__device__ __forceinline__ void byWidth(int n, Run run) {
    if (n <= 1)
        run(Width<1>{});
    else if (n <= 2)
        run(Width<2>{});
    else if (n <= 4)
        run(Width<4>{});
    else if constexpr (BN >= 8) {
        if (n <= 8)
            run(Width<8>{});
        else if constexpr (BN >= 16) {
            if (n <= 12)
                run(Width<12>{});
            else if (n <= 16)
                run(Width<16>{});
            else
                __trap();  // the launch plan runs this stage only where the narrow side is <= BN
        } else {
            __trap();
        }
    } else {
        __trap();
    }
}

extern "C" __global__ void __launch_bounds__(THREADS, MINBLOCKS)
sgemm_narrow(int M, int N, int K, float alpha, const float* __restrict__ A, const float* __restrict__ B,
             float beta, float* __restrict__ C) {
    __shared__ __align__(16) float Bs[2 * BK * pitch(BN)];
    // The narrowest body that holds the narrow side (uniform across the grid).
#if NARROW_ROWS
    if (N > BN && M <= BN) {
        byWidth(M, [&](auto w) { rowsBlock<decltype(w)::value>(M, N, K, alpha, A, B, beta, C, Bs); });
        return;
    }
#endif
    if (N > BN)
        __trap();
    byWidth(N, [&](auto w) { narrowBlock<decltype(w)::value>(M, N, K, alpha, A, B, beta, C, Bs); });
}
