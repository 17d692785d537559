// Shared helpers for every stage. All matrices are row-major:
//   A is M x K, B is K x N, C is M x N, and a stage computes C = alpha * A @ B + beta * C.
// BLAS semantics for beta == 0: C is then not read, so an uninitialised (even NaN) C is fine.
#pragma once

// ---- Epilogue ------------------------------------------------------------------------------------

__device__ __forceinline__ float epilogue(float alpha, float acc, float beta, const float* c) {
    return beta == 0.0f ? alpha * acc : alpha * acc + beta * *c;
}

// epilogue() on four consecutive results of a row; c must be 16-byte aligned. C is read only when
// beta != 0 (beta is the same in every thread: a uniform branch).
__device__ __forceinline__ float4 epilogue4(float alpha, float4 acc, float beta, const float* c) {
    if (beta == 0.0f)
        return make_float4(alpha * acc.x, alpha * acc.y, alpha * acc.z, alpha * acc.w);
    const float4 old = *reinterpret_cast<const float4*>(c);
    return make_float4(alpha * acc.x + beta * old.x, alpha * acc.y + beta * old.y,
                       alpha * acc.z + beta * old.z, alpha * acc.w + beta * old.w);
}

// The activation a fused epilogue applies (a stage's ACT parameter): 0 none, 1 ReLU, 2 GELU in its
// tanh approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), the form the reference uses too.
template <int KIND>
__device__ __forceinline__ float activate(float x) {
    if constexpr (KIND == 1)
        return x < 0.0f ? 0.0f : x;  // a NaN passes through, as np.maximum(x, 0) does (fmaxf would give 0)
    else if constexpr (KIND == 2)
        return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    else
        return x;
}

// ---- 16-byte loads and stores --------------------------------------------------------------------

// One 16-byte access to global or shared memory; p must be 16-byte aligned.
__device__ __forceinline__ float4 load4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ void store4(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }

__device__ __forceinline__ bool aligned16(const void* p) { return (reinterpret_cast<size_t>(p) & 15) == 0; }

// Four consecutive floats of a row through the read-only data cache: one 16-byte load, or four 4-byte
// loads when the row is not 16-byte aligned (VEC false). p[0..3] must lie inside the matrix.
template <bool VEC>
__device__ __forceinline__ float4 ld4(const float* p) {
    if constexpr (VEC)
        return __ldg(reinterpret_cast<const float4*>(p));
    else
        return make_float4(__ldg(p), __ldg(p + 1), __ldg(p + 2), __ldg(p + 3));
}

// ---- Shared-memory addresses and cp.async --------------------------------------------------------

// The 32-bit address of a shared-memory object in the .shared state space, as PTX's shared-memory
// operands (cp.async, mbarrier, TMA, wgmma descriptors) take it.
__device__ __forceinline__ unsigned smem_u32(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// cp.async copies global memory straight into shared memory (no staging registers) while the thread
// goes on. commit_group closes this thread's copies issued so far into a group; wait_group<N> blocks
// until at most N of its groups are still in flight (a barrier then publishes them to the block).
// `dst` is a shared address (smem_u32). The 16-byte copies use .cg, which caches in L2 only: the tile
// is read again from shared memory, never through L1. 4-byte copies exist only as .ca (L1 and L2).
//
// cp_async_16 passes `src` as the generic pointer it is (for global memory the generic and the
// global address are the same); the .L2::128B forms convert it with cvta.to.global. Both give the
// same copy instruction, but ptxas schedules the address arithmetic around them differently (with the
// conversion, stages 15 and 16 need two more registers), so each form keeps its stages' operand.
__device__ __forceinline__ void cp_async_16(unsigned dst, const float* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}
// The .L2::128B hint lets L2 fetch the whole 128-byte line around the copied bytes: when a copy reads
// only part of a line (a row of an A tile of BK = 8 is 32 bytes), the next K-steps' copies of the
// rest of that line then hit in L2.
__device__ __forceinline__ void cp_async_16_l2_128b(unsigned dst, const float* src) {
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;\n" ::"r"(dst),
                 "l"(__cvta_generic_to_global(src)) : "memory");
}
__device__ __forceinline__ void cp_async_4_l2_128b(unsigned dst, const float* src) {
    asm volatile("cp.async.ca.shared.global.L2::128B [%0], [%1], 4;\n" ::"r"(dst),
                 "l"(__cvta_generic_to_global(src)) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

// ---- TF32 ----------------------------------------------------------------------------------------

// x rounded to TF32 (10-bit mantissa) to nearest, ties away from zero (cvt.rna), as the 32-bit
// pattern the tensor-core instructions take (its low 13 bits zero).
__device__ __forceinline__ unsigned to_tf32(float x) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}

// The rest r = x - big of a split, rounded to TF32 the same way with two integer instructions instead of
// cvt.rna's four: cvt also tests for infinity and NaN, which r needs no test for. For a finite x whose
// TF32 rounding is finite, |r| is at most 2^-11 |x| (2^-137 for a subnormal x), so adding half a TF32
// place cannot carry into the exponent's top. Otherwise r is infinite or NaN (x infinite or NaN, or
// within 2^-12 of FP32's largest value, where big rounds to infinity as cvt.rna rounds it), and the
// two instructions keep an infinity and may turn a NaN into a zero or an infinity: big carries x's
// infinity or NaN into the products either way, as it did with cvt.
__device__ __forceinline__ unsigned tf32_rest(float r) { return (__float_as_uint(r) + 0x1000u) & 0xFFFFE000u; }

// x = big + small, both TF32 patterns: the 3xTF32 split. small is big's rounding error (exact in FP32)
// rounded to TF32, so the pair carries about 22 bits of x's significand.
__device__ __forceinline__ void split(float x, unsigned& big, unsigned& small) {
    big = to_tf32(x);
    small = tf32_rest(x - __uint_as_float(big));
}

// ---- Split-K: partial tiles summed by a fixed binary tree ----------------------------------------

// The S blocks of one output tile each hold, in registers, the partial sum of their K-slice z: NACC
// floats per thread, in an order only this thread needs to know (its sibling block's thread tid has
// the same order). They meet in a fixed binary tree over slice indices: a block holds the sum of the
// span [lo, lo + 2^l); where the sibling span exists it stores that sum at slot lo (thread-major, so
// that a warp's stores are whole lines) and counts itself in at the node, whose midpoint parent + 2^l
// is unique to it (counter parent + 2^l - 1 of the tile's S - 1). The first of the two to arrive
// stops; the second adds the other's sum and climbs. Every node adds the same two sums whatever the
// order of arrival (a + b == b + a exactly), so the result never depends on timing; the critical path
// is log2(S) reads and writes of a tile. `slots` points at this tile's S slots and this thread's
// first float4, `counters` at the tile's S - 1 counters; the second block at a node resets its
// counter, so the next launch starts from zero. Returns true in the block that holds the root (the
// whole sum), which then writes C; every other block returns false and must exit without writing.
// Called by all NTHREADS threads of the block.
template <int NACC, int NTHREADS>
__device__ __forceinline__ bool split_tree(float (&acc)[NACC], float4* slots, unsigned* counters, int S, int z) {
    static_assert(NACC % 4 == 0, "the partial tile is stored as float4");
    constexpr int QUADS = NACC / 4;
    __shared__ bool second;  // this block is the second of the two to reach the node
    int lo = z;
    for (int span = 1; span < S; span *= 2) {
        const int parent = lo & ~(2 * span - 1), sib = lo == parent ? parent + span : parent;
        if (parent + span >= S) {  // no sibling span at this level: climb alone
            lo = parent;
            continue;
        }
        float4* mine = slots + (size_t)lo * QUADS * NTHREADS;
#pragma unroll
        for (int q = 0; q < QUADS; ++q)
            __stcg(mine + q * NTHREADS, make_float4(acc[4 * q], acc[4 * q + 1], acc[4 * q + 2], acc[4 * q + 3]));
        __threadfence();  // the sum is visible GPU-wide before this block counts itself in
        __syncthreads();
        if (threadIdx.x == 0) {
            unsigned* count = &counters[parent + span - 1];
            second = atomicAdd(count, 1u) == 1u;
            if (second)
                *count = 0;  // both have counted: ready for the next launch
        }
        __syncthreads();
        if (!second)
            return false;
        __threadfence();  // order the reads of the sibling's sum after the count
        const float4* other = slots + (size_t)sib * QUADS * NTHREADS;
#pragma unroll
        for (int q0 = 0; q0 < QUADS; q0 += 4) {  // 4 float4 in flight: no second accumulator set
            float4 v[4];
#pragma unroll
            for (int j = 0; j < 4; ++j)
                if (q0 + j < QUADS)
                    v[j] = __ldcg(other + (q0 + j) * NTHREADS);
#pragma unroll
            for (int j = 0; j < 4; ++j)
                if (q0 + j < QUADS) {
                    acc[4 * (q0 + j)] += v[j].x;
                    acc[4 * (q0 + j) + 1] += v[j].y;
                    acc[4 * (q0 + j) + 2] += v[j].z;
                    acc[4 * (q0 + j) + 3] += v[j].w;
                }
        }
        lo = parent;
    }
    return true;
}
