// Stage 16 (3xTF32, on trial) - FP32 accuracy from TF32 tensor cores: each operand as a TF32 "big"
// part plus a TF32 "small" remainder, three products per tile.
// x = big + small with big = tf32(x) and small = tf32(x - big): big carries the top 11 bits of the
// significand, small the next 11, so big + small holds x to about 2^-22 relative. The product
// a * b = big_a big_b + big_a small_b + small_a big_b + small_a small_b; the last term is below FP32's
// resolution and is dropped, the other three run on the tensor cores (small terms first, so that
// they are not lost against the large running sum), accumulating in FP32. Precision class 3xtf32:
// held to the unchanged strict-FP32 tolerance.
//
// Everything else is stage 15: 128 x 128 block tiles, 8 warps of 64 x 32, mma.sync.m16n8k8 TF32 with
// fragments loaded by LDS from padded, conflict-free tiles, a 4-slot cp.async ring. The split costs
// two conversions and a subtraction per loaded element and three mma instead of one.

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
#ifndef WTM
#define WTM 64
#endif
#ifndef WTN
#define WTN 32
#endif
#ifndef STAGES
#define STAGES 4
#endif
#ifndef MINBLOCKS
#define MINBLOCKS 2
#endif

constexpr int NTHREADS = 32 * (BM / WTM) * (BN / WTN);  // one warp per warp tile
#ifdef THREADS
static_assert(THREADS == NTHREADS, "THREADS (the launch's block size) must be 32 * (BM / WTM) * (BN / WTN)");
#endif
constexpr int TM = WTM / 16, TN = WTN / 8;           // 16 x 8 mma tiles per warp
constexpr int AS_LD = BK + 4;                        // As[m][k]: rows 4 banks apart (mod 32)
constexpr int BS_LD = BN + 8;                        // Bs[k][n]: rows 8 banks apart (mod 32)
constexpr int A_STAGE = BM * AS_LD, B_STAGE = BK * BS_LD;  // floats per ring slot

static_assert(BM % WTM == 0 && BN % WTN == 0, "the block tile must be a whole number of warp tiles");
static_assert(WTM % 16 == 0 && WTN % 8 == 0, "warp tiles are made of 16 x 8 mma tiles");
static_assert(BK % 8 == 0, "BK must be a multiple of the mma's k = 8");
static_assert(AS_LD % 32 == 4 || AS_LD % 32 == 20 || AS_LD % 32 == 12 || AS_LD % 32 == 28,
              "A's pitch must put the 8 rows of a fragment load in 8 different groups of 4 banks");
static_assert(BS_LD % 32 == 8 || BS_LD % 32 == 24, "B's pitch must put the 4 rows of a fragment load 8 banks apart");
static_assert((BM * BK) % (4 * NTHREADS) == 0 && (BK * BN) % (4 * NTHREADS) == 0,
              "the A and B tiles must be whole float4 per thread");
static_assert(NTHREADS % (BK / 4) == 0 && NTHREADS % (BN / 4) == 0, "a thread keeps its copy column");
static_assert(STAGES >= 2, "the ring needs at least two slots");

// cp.async (as in stage 14): 16-byte global -> shared copies in the background, in commit groups.
__device__ __forceinline__ void cp_async_16(float* dst, const float* src) {
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

__device__ __forceinline__ unsigned to_tf32(float x) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}

// x = big + small, both TF32 (bit patterns for the mma): the 3xTF32 split.
__device__ __forceinline__ void split(float x, unsigned& big, unsigned& small) {
    big = to_tf32(x);
    small = to_tf32(x - __uint_as_float(big));
}

// d += a * b for one 16 x 8 x 8 tile (TF32 inputs, FP32 accumulators).
__device__ __forceinline__ void mma_tf32(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

extern "C" __global__ void __launch_bounds__(NTHREADS, MINBLOCKS)
sgemm_3xtf32(int M, int N, int K, float alpha, const float* __restrict__ A,
               const float* __restrict__ B, float beta, float* __restrict__ C) {
    extern __shared__ __align__(128) float smem[];  // STAGES slots of As, then STAGES slots of Bs
    float* As = smem;
    float* Bs = smem + STAGES * A_STAGE;

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int g = lane / 4, t = lane % 4;  // the fragment coordinates of this lane (see above)
    const int warpRow = warp / (BN / WTN), warpCol = warp % (BN / WTN);
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const int numTiles = K / BK;

    // Copy maps of stage 14: float4 number tid + j * THREADS of each row-major tile; the thread's
    // column is fixed, its rows step by A_STEP (B_STEP).
    constexpr int A_STEP = NTHREADS / (BK / 4), B_STEP = NTHREADS / (BN / 4);
    const float* aG = A + (size_t)(row0 + tid / (BK / 4)) * K + (tid % (BK / 4)) * 4;
    const float* bG = B + (size_t)(tid / (BN / 4)) * N + col0 + (tid % (BN / 4)) * 4;
    const int aS = (tid / (BK / 4)) * AS_LD + (tid % (BK / 4)) * 4;
    const int bS = (tid / (BN / 4)) * BS_LD + (tid % (BN / 4)) * 4;
    auto issue = [&](int kt, int s) {
#pragma unroll
        for (int j = 0; j < BM / A_STEP; ++j)
            cp_async_16(&As[s * A_STAGE + aS + j * A_STEP * AS_LD], aG + (size_t)j * A_STEP * K + kt * BK);
#pragma unroll
        for (int j = 0; j < BK / B_STEP; ++j)
            cp_async_16(&Bs[s * B_STAGE + bS + j * B_STEP * BS_LD], bG + ((size_t)kt * BK + j * B_STEP) * N);
    };

    float acc[TM][TN][4] = {};
    // This lane's first fragment element inside a slot: A[warp's row + g][t], B[t][warp's column + g].
    const int aFrag = (warpRow * WTM + g) * AS_LD + t;
    const int bFrag = t * BS_LD + warpCol * WTN + g;

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {  // prologue: tiles 0 .. STAGES-2 in flight, one group each
        if (s < numTiles)
            issue(s, s);
        cp_async_commit();
    }
    for (int kt = 0; kt < numTiles; ++kt) {
        cp_async_wait<STAGES - 2>();  // tile kt has landed (this thread's copies) ...
        __syncthreads();              // ... everyone's; and nobody still reads tile kt-1's slot
        const int next = kt + STAGES - 1;
        if (next < numTiles)
            issue(next, next % STAGES);
        cp_async_commit();
        const float* as = &As[(kt % STAGES) * A_STAGE + aFrag];
        const float* bs = &Bs[(kt % STAGES) * B_STAGE + bFrag];
#pragma unroll
        for (int kk = 0; kk < BK; kk += 8) {
            unsigned bBig[TN][2], bSmall[TN][2];
#pragma unroll
            for (int j = 0; j < TN; ++j) {
                split(bs[kk * BS_LD + j * 8], bBig[j][0], bSmall[j][0]);
                split(bs[(kk + 4) * BS_LD + j * 8], bBig[j][1], bSmall[j][1]);
            }
#pragma unroll
            for (int i = 0; i < TM; ++i) {
                const float* ai = as + i * 16 * AS_LD + kk;
                unsigned aBig[4], aSmall[4];
                split(ai[0], aBig[0], aSmall[0]);
                split(ai[8 * AS_LD], aBig[1], aSmall[1]);
                split(ai[4], aBig[2], aSmall[2]);
                split(ai[8 * AS_LD + 4], aBig[3], aSmall[3]);
#pragma unroll
                for (int j = 0; j < TN; ++j) {
                    mma_tf32(acc[i][j], aSmall, bBig[j]);  // the two small terms first
                    mma_tf32(acc[i][j], aBig, bSmall[j]);
                    mma_tf32(acc[i][j], aBig, bBig[j]);
                }
            }
        }
    }
    cp_async_wait<0>();  // no copy may still target shared memory when the block exits

    // Epilogue: acc[i][j] holds C rows r and r + 8 (r = warp's row + 16 i + g), columns c, c + 1
    // (c = warp's column + 8 j + 2 t): two float2 per tile. C is read only when beta != 0.
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = row0 + warpRow * WTM + i * 16 + g + 8 * h;
                const int c = col0 + warpCol * WTN + j * 8 + 2 * t;
                float2* p = reinterpret_cast<float2*>(C + (size_t)r * N + c);
                float2 v = make_float2(alpha * acc[i][j][2 * h], alpha * acc[i][j][2 * h + 1]);
                if (beta != 0.0f) {
                    const float2 old = *p;
                    v.x += beta * old.x;
                    v.y += beta * old.y;
                }
                *p = v;
            }
}
