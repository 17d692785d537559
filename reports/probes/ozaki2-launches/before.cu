// Stage 22 (FP32-accurate by emulation) - the Ozaki scheme II: an FP32 GEMM from exact INT8 products on
// Hopper's tensor cores and the Chinese remainder theorem. Built for sm_90a (wgmma, TMA).
//
// Six kernels, launched in this order on one stream (the phases of the stage's config entry):
//   ozaki_row_max    |A| per row, as float bits, atomicMax into rowMax (zeroed before)
//   ozaki_col_max    |B| per column, likewise into colMax
//   ozaki_residues_a A's row i scaled by 2^e_i to integers of at most `bits` bits, then one symmetric INT8
//                    residue per modulus: resA[j][i][k], K-major, rows KP bytes (K padded to PADK with zeros)
//   ozaki_residues_b the same for B's columns (2^f_n), written transposed: resB[j][n][k], K-major
//   ozaki_int8_gemm  per modulus j (grid z): the exact INT32 product resA[j] resB[j]^T on wgmma
//                    (m64n256k32, s8 x s8 -> s32), reduced modulo m_j in the epilogue and stored as one
//                    byte: prod[j][i][n], rows NP bytes (N padded to 16)
//   ozaki_reconstruct the CRT sum of the bytes gives the integer product A'B' exactly (below), scaled back by
//                    2^-(e_i + f_n), then alpha and beta, rounded once to FP32
//
// Why it is exact: every |A'| <= 2^bits and |B'| <= 2^bits, so |(A'B')_in| <= K 4^bits; operand_bits(K)
// (at most 30: INT32) keeps this below P/2 (P = the moduli's product, less than 2^64 for 8 of them) with
// room for the reconstruction's double-precision rounding. The only rounding before the last is the scaling's:
// an element more than bits - 24 binades below its row's (column's) largest loses low bits.
//
// Reconstruction. With W_j = (P / m_j) * ((P / m_j)^-1 mod m_j), S = sum_j r_j W_j is congruent to A'B'
// modulo P. Write S = n P + v with v the symmetric representative (|v| < P/2): n is the integer nearest
// to x = sum_j r_j (W_j / P) = sum_j r_j u_j / m_j, which double precision gives to far better than 1/2
// (eight terms below 256 each: error below 2^-39, against the 2^-21 the width leaves). Then (x - n) P is v
// within 2^25, and S - n P modulo 2^32 (32-bit integers) is v's low word exactly: the two give v (crt_value).

#include <cstdint>

#include "common.cuh"

#ifndef NMOD
#define NMOD 8        // moduli (the first NMOD of MODULI): P < 2^64 needs NMOD <= 8
#endif
#ifndef BM
#define BM 128        // GEMM tile rows: one 64-row consumer warpgroup per 64
#endif
#ifndef BN
#define BN 256        // GEMM tile columns: wgmma's N
#endif
#ifndef STAGES
#define STAGES 4
#endif
#ifndef INFLIGHT
#define INFLIGHT 1    // wgmma groups left in flight while the next K-tile's are issued (0 or 1)
#endif
#ifndef PRODUCER_REGS
#define PRODUCER_REGS 40
#endif
#ifndef CONSUMER_REGS
#define CONSUMER_REGS 232
#endif

static_assert(NMOD >= 1 && NMOD <= 8, "NMOD: 1..8 (P < 2^64)");
static_assert(BM == 64 || BM == 128, "BM: one or two 64-row consumer warpgroups");
static_assert(BN == 256, "BN: wgmma m64n256k32");
static_assert(INFLIGHT == 0 || INFLIGHT == 1, "INFLIGHT: 0 or 1");

// The eight largest pairwise coprime integers up to 256 (tools/ozaki2_model.py's moduli), largest first.
__host__ __device__ constexpr int modulus(int j) {
    return j == 0 ? 256 : j == 1 ? 255 : j == 2 ? 253 : j == 3 ? 251 : j == 4 ? 247 : j == 5 ? 241 : j == 6 ? 239 : 233;
}
__host__ __device__ constexpr uint64_t product_of_moduli() {
    uint64_t p = 1;
    for (int j = 0; j < NMOD; ++j) p *= (uint64_t)modulus(j);
    return p;
}
constexpr uint64_t P = product_of_moduli();
// u_j = (P / m_j)^-1 mod m_j, by trial (m_j <= 256)
__host__ __device__ constexpr int crt_inverse(int j) {
    const int m = modulus(j), rest = (int)((P / (uint64_t)m) % (uint64_t)m);
    for (int u = 1; u < m; ++u)
        if (rest * u % m == 1) return u;
    return m == 1 ? 0 : -1;
}
__host__ __device__ constexpr uint64_t crt_weight(int j) { return P / (uint64_t)modulus(j) * (uint64_t)crt_inverse(j); }

// The bits an operand row (column) keeps: the largest b <= 30 with K 4^b <= Q = P/2 - P/2^21 (2^-20 of
// P/2 left as the reconstruction's rounding room). Every kernel that scales computes it from K itself, so
// it must be cheap: K's bit length L bounds log2(Q / K) to [LQ - L - 1, LQ - L], so b starts at most one
// step too high and the loop takes one or two shift-and-compare steps (no division).
constexpr uint64_t WIDTH_Q = P / 2 - P / (1ull << 21);
__host__ __device__ constexpr int bit_length64(uint64_t x) { return x ? 1 + bit_length64(x >> 1) : 0; }
constexpr int WIDTH_LQ = bit_length64(WIDTH_Q);
__host__ __device__ __forceinline__ int bit_length(unsigned x) {
#ifdef __CUDA_ARCH__
    return 32 - __clz(x);
#else
    return 32 - __builtin_clz(x);
#endif
}
__host__ __device__ __forceinline__ int operand_bits(int K) {
    int b = min(30, (WIDTH_LQ - bit_length((unsigned)K)) / 2);
    while (b > 0 && (uint64_t)K > (WIDTH_Q >> (2 * b))) --b;  // K 4^b <= Q  <=>  K <= floor(Q / 4^b)
    return b;
}

// ---- scaling -----------------------------------------------------------------------------------------

// |x| as bits: for non-negative floats the integer order is the numeric order (NaN above infinity).
__device__ __forceinline__ unsigned abs_bits(float x) { return __float_as_uint(x) & 0x7FFFFFFFu; }

// The power of two that brings a row's (column's) largest magnitude below 2^bits: bits - q for
// max = f 2^q, f in [0.5, 1); 0 for an all-zero row. A non-finite maximum: the caller's NaN.
__device__ __forceinline__ int scale_exponent(unsigned maxBits, int bits) {
    int q = 0;
    frexpf(__uint_as_float(maxBits), &q);
    return maxBits == 0 ? 0 : bits - q;
}

// 2^e as two normal floats whose product it is: scale_exponent gives e in [-128, 178] (bits <= 30, a
// maximum's binade from -148 to 128), so each half lies in [-64, 89].
struct Pow2 { float lo, hi; };
__device__ __forceinline__ float pow2f(int e) { return __int_as_float((127 + e) << 23); }  // e in [-126, 127]
__device__ __forceinline__ Pow2 pow2_split(int e) { const int h = e >> 1; return {pow2f(h), pow2f(e - h)}; }

// x 2^e rounded to the nearest integer (|result| <= 2^bits: exact in INT32). The two products are exact but
// where the first underflows, and then |x 2^e| < 2^-126 rounds to 0 either way.
__device__ __forceinline__ int scaled(float x, Pow2 s) { return __float2int_rn(x * s.lo * s.hi); }

// The symmetric residue of v modulo M_ as a byte: v - M_ floor((v + H) / M_), H = M_ / 2, which is in [-H, H]
// for odd M_ (the model's residue()); for 256 it is v's low byte, [-128, 128). For |v| <= 2^30 the offset
// u = v + H + M_ ceil(2^30 / M_) is in [0, 2^31 + 2^9), and floor(u / M_) = (u R) >> 39 with R = ceil(2^39 / M_):
// R M_ - 2^39 < M_ adds less than u / 2^39 < 1/256 to u / M_, whose fraction is at most 1 - 1/M_ (M_ < 256).
// Then u - M_ floor(u / M_) - H is the residue: an add, a multiply-high and shift, a multiply-add.
template <int M_>
__host__ __device__ __forceinline__ unsigned residue_byte(int v) {
    if constexpr (M_ == 256) {
        return (unsigned)v & 0xFFu;
    } else {
        static_assert(M_ > 128 && M_ < 256 && M_ % 2 == 1, "odd moduli above 128: the shift of 39 and H below 128");
        constexpr unsigned H = M_ / 2, OFFSET = H + M_ * (((1u << 30) + M_ - 1) / M_);
        constexpr unsigned long long R = ((1ull << 39) + M_ - 1) / M_;
        const unsigned u = (unsigned)v + OFFSET;
        const unsigned q = (unsigned)(((unsigned long long)u * R) >> 39);
        return (u - q * M_ - H) & 0xFFu;
    }
}

// Row maxima of A: block (32, 8), warp y takes row blockIdx.y * 8 + y and 1024 columns from blockIdx.x * 1024.
extern "C" __global__ void ozaki_row_max(int M, int K, const float* __restrict__ A, unsigned* __restrict__ rowMax) {
    for (int row = blockIdx.y * 8 + threadIdx.y; row < M; row += gridDim.y * 8) {  // rows: a grid-stride loop
        const float* a = A + (size_t)row * K;
        unsigned mx = 0;
        for (int k = blockIdx.x * 1024 + threadIdx.x, end = min(K, (int)(blockIdx.x + 1) * 1024); k < end; k += 32)
            mx = max(mx, abs_bits(__ldg(a + k)));
        for (int o = 16; o; o >>= 1) mx = max(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, o));
        if (threadIdx.x == 0 && mx) atomicMax(rowMax + row, mx);
    }
}

// Column maxima of B: block (32, 8) over 32 columns; rows blockIdx.y * 256 .. + 255, 8 at a time.
extern "C" __global__ void ozaki_col_max(int K, int N, const float* __restrict__ B, unsigned* __restrict__ colMax) {
    __shared__ unsigned part[8][33];
    const int col = blockIdx.x * 32 + threadIdx.x;
    unsigned mx = 0;
    if (col < N)
        for (int k = blockIdx.y * 256 + threadIdx.y, end = min(K, (int)(blockIdx.y + 1) * 256); k < end; k += 8)
            mx = max(mx, abs_bits(__ldg(B + (size_t)k * N + col)));
    part[threadIdx.y][threadIdx.x] = mx;
    __syncthreads();
    if (threadIdx.y == 0 && col < N) {
        for (int y = 1; y < 8; ++y) mx = max(mx, part[y][threadIdx.x]);
        if (mx) atomicMax(colMax + col, mx);
    }
}

// Four residues of four consecutive K elements, as one 32-bit word (byte b = element b), modulus J.
template <int J>
__device__ __forceinline__ unsigned residue_word(const int (&v)[4]) {
    return residue_byte<modulus(J)>(v[0]) | residue_byte<modulus(J)>(v[1]) << 8 |
           residue_byte<modulus(J)>(v[2]) << 16 | residue_byte<modulus(J)>(v[3]) << 24;
}
template <int J = 0>
__device__ __forceinline__ void store_residues(uint32_t* out, size_t plane, const int (&v)[4]) {
    if constexpr (J < NMOD) {
        out[J * plane] = residue_word<J>(v);
        store_residues<J + 1>(out, plane, v);
    }
}

// A's residues: thread x of a row: the word of K elements 4x .. 4x + 3 (zeros past K), read as one 16-byte
// load where rows start on 16 bytes (K a multiple of 4); rows by a grid-stride loop over y.
extern "C" __global__ void ozaki_residues_a(int M, int K, int KP, const float* __restrict__ A,
                                            const unsigned* __restrict__ rowMax, uint32_t* __restrict__ resA) {
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    if (x * 4 >= KP) return;
    const int bits = operand_bits(K);
    const bool vec = (K & 3) == 0 && aligned16(A);
    for (int row = blockIdx.y; row < M; row += gridDim.y) {
        const Pow2 e = pow2_split(scale_exponent(rowMax[row], bits));
        const float* a = A + (size_t)row * K;
        int v[4] = {0, 0, 0, 0};
        if (vec) {
            if (4 * x < K) {
                const float4 f = __ldg(reinterpret_cast<const float4*>(a) + x);
                v[0] = scaled(f.x, e); v[1] = scaled(f.y, e); v[2] = scaled(f.z, e); v[3] = scaled(f.w, e);
            }
        } else {
#pragma unroll
            for (int b = 0; b < 4; ++b) {
                const int k = 4 * x + b;
                v[b] = k < K ? scaled(__ldg(a + k), e) : 0;
            }
        }
        store_residues(resA + (size_t)row * (KP / 4) + x, (size_t)M * (KP / 4), v);
    }
}

// B's residues, transposed through shared memory: a block takes 64 rows (k) x 32 columns (n) of B,
// reads them along n (coalesced), and writes each column's 64 k as 16 words a modulus along k.
extern "C" __global__ void __launch_bounds__(256) ozaki_residues_b(int K, int N, int KP, const float* __restrict__ B,
                                                                   const unsigned* __restrict__ colMax,
                                                                   uint32_t* __restrict__ resB) {
    __shared__ int t[32][65];  // [n][k], one word of padding: the column reads of the write phase are conflict-free
    const int k0 = blockIdx.y * 64, n0 = blockIdx.x * 32, tx = threadIdx.x % 32, ty = threadIdx.x / 32;
    const int bits = operand_bits(K);
    {
        const int col = n0 + tx;
        const Pow2 e = pow2_split(col < N ? scale_exponent(colMax[col], bits) : 0);
#pragma unroll
        for (int r = ty; r < 64; r += 8) {
            const int k = k0 + r;
            t[tx][r] = col < N && k < K ? scaled(__ldg(B + (size_t)k * N + col), e) : 0;
        }
    }
    __syncthreads();
#pragma unroll
    for (int it = 0; it < 2; ++it) {
        const int idx = it * 256 + threadIdx.x, n = idx / 16, q = idx % 16, col = n0 + n, k = k0 + 4 * q;
        if (col < N && k < KP) {
            const int v[4] = {t[n][4 * q], t[n][4 * q + 1], t[n][4 * q + 2], t[n][4 * q + 3]};
            store_residues(resB + (size_t)col * (KP / 4) + k / 4, (size_t)N * (KP / 4), v);
        }
    }
}

// ---- INT8 products ---------------------------------------------------------------------------------
//
// Block tile BM x BN of one modulus's product (grid: x over N, y over M, z over moduli); K-tiles of 128
// bytes (one 128-byte swizzle line a row), four wgmma k32 steps each. One producer warpgroup (one thread
// issues the TMA copies) and BM / 64 consumer warpgroups, each 64 rows x 256 columns: 128 INT32
// accumulators a thread. Both operands K-major in shared memory, read by wgmma through descriptors.
// The residue planes are one tensor each ([NMOD * rows] x KP bytes): a tile that runs past a plane's
// last row reads the next plane's first rows, which only reach output rows (columns) the epilogue drops.

constexpr int CONSUMERS = BM / 64;
constexpr int NTHREADS = 128 * (CONSUMERS + 1);
constexpr int BKB = 128;                               // K-tile, bytes = INT8 elements
constexpr int A_BYTES = BM * BKB, B_BYTES = BN * BKB;
constexpr int SLOT_BYTES = A_BYTES + B_BYTES;
constexpr int RING_BYTES = STAGES * SLOT_BYTES;
constexpr int EP_LD = BN + 16;                         // staged byte rows: 16 B of padding against bank conflicts
static_assert(CONSUMERS * 64 * EP_LD <= RING_BYTES, "the epilogue stages in the ring");
static_assert(SLOT_BYTES % 1024 == 0, "swizzled slots stay 1024-byte aligned");

struct __align__(64) TensorMap { unsigned long long opaque[16]; };
__device__ TensorMap tmap_ra;  // resA: box 128 B x BM rows, 128-byte swizzle
__device__ TensorMap tmap_rb;  // resB: box 128 B x BN rows

__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    asm volatile(
        "{\n.reg .pred done;\n"
        "wait_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra wait_%=;\n}\n" ::"r"(bar), "r"(parity) : "memory");
}
__device__ __forceinline__ void tma_load_2d(unsigned dst, const TensorMap* map, int x, int y, unsigned bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
        ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(bar) : "memory");
}
// wgmma descriptor of a K-major, 128-byte-swizzled operand at shared address `addr` (as stage 17's).
__device__ __forceinline__ unsigned long long wgmma_desc(unsigned addr) {
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | (1ull << 16) | ((unsigned long long)(1024 >> 4) << 32) |
           (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N_>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N_) : "memory"); }

#define D8(i) "+r"(d[i]), "+r"(d[i + 1]), "+r"(d[i + 2]), "+r"(d[i + 3]), "+r"(d[i + 4]), "+r"(d[i + 5]), \
              "+r"(d[i + 6]), "+r"(d[i + 7])
// d(64 x 256, INT32) += a(64 x 32, s8) b(32 x 256, s8), both from shared memory; scaleD = 0: d = a b.
__device__ __forceinline__ void wgmma_s8(int (&d)[128], unsigned long long descA, unsigned long long descB, int scaleD) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
        "%128, %129, p;\n}\n"
        : D8(0), D8(8), D8(16), D8(24), D8(32), D8(40), D8(48), D8(56),
          D8(64), D8(72), D8(80), D8(88), D8(96), D8(104), D8(112), D8(120)
        : "l"(descA), "l"(descB), "r"(scaleD));
}
#undef D8

// The accumulators modulo M_ as bytes in [0, M_), into the staging rows (fragment of m64nN: thread
// lane = 4 g + t of warp w holds rows 16 w + g (+ 8) and columns 8 c + 2 t (+ 1) of each 8-column chunk c).
template <int M_>
__device__ __forceinline__ void stage_bytes(const int (&d)[128], unsigned char* stage, int w, int g, int t) {
#pragma unroll
    for (int c = 0; c < 32; ++c)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            int r0 = d[4 * c + 2 * h] % M_, r1 = d[4 * c + 2 * h + 1] % M_;
            r0 += r0 < 0 ? M_ : 0;
            r1 += r1 < 0 ? M_ : 0;
            *reinterpret_cast<uint16_t*>(stage + (16 * w + g + 8 * h) * EP_LD + 8 * c + 2 * t) =
                (uint16_t)(r0 | (r1 << 8));
        }
}
template <int J = 0>
__device__ __forceinline__ void stage_modulus(int j, const int (&d)[128], unsigned char* stage, int w, int g, int t) {
    if constexpr (J < NMOD) {
        if (j == J)
            stage_bytes<modulus(J)>(d, stage, w, g, t);
        else
            stage_modulus<J + 1>(j, d, stage, w, g, t);
    }
}

extern "C" __global__ void __launch_bounds__(NTHREADS, 1)
ozaki_int8_gemm(int M, int N, int KP, int NP, unsigned char* __restrict__ prod) {
    extern __shared__ unsigned char smem_raw[];
    const unsigned raw = smem_u32(smem_raw);
    const unsigned base = (raw + 1023u) & ~1023u;
    unsigned char* slots = smem_raw + (base - raw);
    const unsigned bars = base + RING_BYTES;  // full[0..STAGES), empty[0..STAGES)
    auto full = [&](int s) { return bars + 8u * s; };
    auto empty = [&](int s) { return bars + 8u * (STAGES + s); };

    const int tid = threadIdx.x, wg = tid / 128, j = blockIdx.z;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const int numTiles = (KP + BKB - 1) / BKB;

    if (tid == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full(s), 1);
            mbar_init(empty(s), 4 * CONSUMERS);  // one arrival per consumer warp
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PRODUCER_REGS));
        if (tid == 0) {
            asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(&tmap_ra) : "memory");
            asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(&tmap_rb) : "memory");
            for (int it = 0; it < numTiles; ++it) {
                const int s = it % STAGES;
                if (it >= STAGES)
                    mbar_wait(empty(s), ((it / STAGES) - 1) & 1);
                mbar_expect_tx(full(s), SLOT_BYTES);
                const unsigned slot = base + s * SLOT_BYTES;
                tma_load_2d(slot, &tmap_ra, it * BKB, j * M + row0, full(s));
                tma_load_2d(slot + A_BYTES, &tmap_rb, it * BKB, j * N + col0, full(s));
            }
        }
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CONSUMER_REGS));
        const int c = wg - 1, ti = tid % 128, w = ti / 32, lane = ti % 32, g = lane / 4, t = lane % 4;
        int d[128];
#pragma unroll
        for (int i = 0; i < 128; ++i) d[i] = 0;
        // INFLIGHT = 1: one group of wgmma in flight: K-tile it's four are issued before K-tile it - 1's are
        // waited for, and only then is it - 1's slot released to the producer. 0: each K-tile's are waited for.
        for (int it = 0; it < numTiles; ++it) {
            const int s = it % STAGES;
            mbar_wait(full(s), (it / STAGES) & 1);
            const unsigned aTile = base + s * SLOT_BYTES + c * 64 * BKB, bTile = base + s * SLOT_BYTES + A_BYTES;
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BKB / 32; ++kk)  // k32 steps: 32 bytes further into each swizzled line
                wgmma_s8(d, wgmma_desc(aTile + 32 * kk), wgmma_desc(bTile + 32 * kk), 1);
            wgmma_commit();
            wgmma_wait<INFLIGHT>();
            __syncwarp();
            if (it >= INFLIGHT && lane == 0)
                mbar_arrive(empty((it - INFLIGHT) % STAGES));
        }
        wgmma_wait<0>();
        // every consumer is past its last wgmma before the ring is reused for staging
        asm volatile("bar.sync 1, %0;\n" ::"n"(128 * CONSUMERS) : "memory");
        unsigned char* stage = slots + c * 64 * EP_LD;
        stage_modulus(j, d, stage, w, g, t);
        asm volatile("bar.sync %0, 128;\n" ::"r"(2 + c) : "memory");
        unsigned char* out = prod + (size_t)j * M * NP;
#pragma unroll 4
        for (int i = ti; i < 64 * (BN / 16); i += 128) {  // 16-byte pieces: 16 a row
            const int r = i / (BN / 16), q = i % (BN / 16), row = row0 + 64 * c + r, col = col0 + 16 * q;
            if (row < M && col < NP)
                *reinterpret_cast<uint4*>(out + (size_t)row * NP + col) =
                    *reinterpret_cast<const uint4*>(stage + r * EP_LD + 16 * q);
        }
    }
}

// ---- reconstruction ----------------------------------------------------------------------------------

// The CRT terms of modulus J onwards for four consecutive columns (one 32-bit load a plane, byte i =
// column i), their constants evaluated at compile time: S modulo 2^32 in integers, and x = sum_j r_j u_j / m_j
// (= S / P) in double, r_j made a double without a conversion instruction (2^52 + r_j has r_j as its low word).
// x is within 2^-39 of the exact sum: u_j / m_j rounded once, eight fused multiply-adds of values below 2^11.
template <int J = 0>
__device__ __forceinline__ void crt_terms(const unsigned char* p, size_t plane, unsigned (&s)[4], double (&x)[4]) {
    if constexpr (J < NMOD) {
        constexpr unsigned W = (unsigned)crt_weight(J);                   // W_j modulo 2^32
        constexpr double F = (double)crt_inverse(J) / (double)modulus(J);  // W_j / P, rounded once
        const unsigned word = __ldg(reinterpret_cast<const unsigned*>(p + J * plane));
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const unsigned r = __byte_perm(word, 0u, 0x4440u | i);  // byte i, zero-extended
            s[i] += r * W;                                           // wraps modulo 2^32
            x[i] = fma(__hiloint2double(0x43300000, (int)r) - 0x1p52, F, x[i]);
        }
        crt_terms<J + 1>(p, plane, s, x);
    }
}

// v from S modulo 2^32 and x, exactly, and as a double rounded once. n = rint(x) (x lies at least 2^-21 from a
// half-integer: |v| <= P/2 - P/2^21, operand_bits); x - n = v / P exactly in double, so (x - n) P is v within
// 2^25; v's low 32 bits are S - n P modulo 2^32, and its high ones floor(v / 2^32) the nearest integer of
// ((x - n) P - low) 2^-32 (within 2^-6 of it). Adding 1.5 2^52 rounds a double below 2^51 to an integer and
// leaves that integer in the low word; 2^52 + a 32-bit integer is that integer exactly.
__device__ __forceinline__ double crt_value(unsigned s, double x) {
    constexpr double ROUND = 0x1.8p52;
    const double xr = x + ROUND;
    const unsigned n = (unsigned)__double2loint(xr);
    const double near = (x - (xr - ROUND)) * (double)P;             // v within 2^25
    const unsigned low = s - n * (unsigned)P;                         // v modulo 2^32
    const double lowd = __hiloint2double(0x43300000, (int)low) - 0x1p52;
    const double high = ((near - lowd) * 0x1p-32 + ROUND) - ROUND;   // floor(v / 2^32)
    return fma(high, 0x1p32, lowd);                                   // v, rounded once
}

// 2^-x as a double (|x| well inside the double's exponent range: |e_i + f_n| < 400 here).
__device__ __forceinline__ double pow2_neg(int x) { return __longlong_as_double((long long)(1023 - x) << 52); }

// Four consecutive outputs a thread (rows by a grid-stride loop over y; the product rows are NP bytes, a
// multiple of 16, so the four bytes of a plane are one aligned word even past N): the CRT sum of their
// NMOD bytes (above), 2^-(e_i + f_n), alpha and beta, in double, rounded once to FP32.
extern "C" __global__ void ozaki_reconstruct(int M, int N, int K, int NP, const unsigned char* __restrict__ prod,
                                             const unsigned* __restrict__ rowMax, const unsigned* __restrict__ colMax,
                                             float alpha, float beta, float* __restrict__ C) {
    const int col = 4 * (blockIdx.x * blockDim.x + threadIdx.x);
    if (col >= N) return;
    const int bits = operand_bits(K);
    int f[4];
    bool bad[4];  // an infinity or NaN in the column
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const unsigned cm = col + i < N ? colMax[col + i] : 0u;
        f[i] = scale_exponent(cm, bits);
        bad[i] = cm >= 0x7F800000u;
    }
    const bool vec = (N & 3) == 0 && aligned16(C);  // rows on 16-byte boundaries: one float4 a thread
    for (int row = blockIdx.y; row < M; row += gridDim.y) {
        unsigned s[4] = {0, 0, 0, 0};
        double x[4] = {0.0, 0.0, 0.0, 0.0};
        crt_terms(prod + (size_t)row * NP + col, (size_t)M * NP, s, x);
        const unsigned rm = rowMax[row];
        const int e = scale_exponent(rm, bits);
        float* c = C + (size_t)row * N + col;
        float old[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (beta != 0.0f) {
            if (vec) {
                const float4 o = *reinterpret_cast<const float4*>(c);
                old[0] = o.x; old[1] = o.y; old[2] = o.z; old[3] = o.w;
            } else {
#pragma unroll
                for (int i = 0; i < 4; ++i) old[i] = col + i < N ? c[i] : 0.0f;
            }
        }
        float out[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const double ab = rm >= 0x7F800000u || bad[i] ? (double)__int_as_float(0x7FC00000)
                                                          : crt_value(s[i], x[i]) * pow2_neg(e + f[i]);  // exact scaling
            out[i] = beta == 0.0f ? (float)(alpha * ab) : (float)(alpha * ab + (double)beta * (double)old[i]);
        }
        if (vec) {
            *reinterpret_cast<float4*>(c) = make_float4(out[0], out[1], out[2], out[3]);
        } else {
#pragma unroll
            for (int i = 0; i < 4; ++i)
                if (col + i < N) c[i] = out[i];
        }
    }
}
