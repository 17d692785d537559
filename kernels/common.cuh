// Shared helpers for every stage. All matrices are row-major:
//   A is M x K, B is K x N, C is M x N, and a stage computes C = alpha * A @ B + beta * C.
// BLAS semantics for beta == 0: C is then not read, so an uninitialised (even NaN) C is fine.
#pragma once

__device__ __forceinline__ float epilogue(float alpha, float acc, float beta, const float* c) {
    return beta == 0.0f ? alpha * acc : alpha * acc + beta * *c;
}
