// GEMMs through cuBLAS (bf16 inputs, fp32 accumulation and output) and the
// SwiGLU expert built from them.
//
// Row-major to cuBLAS's column-major: a row-major (r, c) matrix is the
// column-major (c, r) matrix with leading dimension c. Y (m, n) = X (m, k)
// @ W (n, k)^T, read column-major, is C (n, m) = op(A) (n, k) * B (k, m)
// with A = W seen as column-major (k, n), ld k, op = transpose; B = X seen
// as column-major (k, m), ld k; C = Y seen as column-major (n, m), ld n.
#include "gpu_kernels/cuda_check.h"
#include "gpu_kernels/gpu_kernels.h"

GpuBlas::GpuBlas(GpuStream stream) : stream_(stream) {
    CUBLAS_CHECK(cublasCreate(&handle_));
    try {
        CUBLAS_CHECK(cublasSetStream(handle_, stream));
    } catch (...) {
        cublasDestroy(handle_);
        throw;
    }
}

GpuBlas::~GpuBlas() {
    if (handle_) cublasDestroy(handle_);
}

void gpu_matmul_bf16(GpuBlas& blas, float* y, const bf16* x, const bf16* w, int m, int n, int k) {
    if (m <= 0 || n <= 0) return;
    const float alpha = 1.0f, beta = 0.0f;
    CUBLAS_CHECK(cublasGemmEx(blas.handle(), CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, w, CUDA_R_16BF, k, x,
                              CUDA_R_16BF, k, &beta, y, CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void gpu_matmul_f32in(GpuBlas& blas, float* y, const float* x, bf16* x_bf16, const bf16* w, int m, int n, int k) {
    if (m <= 0 || n <= 0) return;
    gpu_f32_to_bf16(x_bf16, x, long(m) * k, blas.stream());
    gpu_matmul_bf16(blas, y, x_bf16, w, m, n, k);
}

void gpu_expert_ffn(GpuBlas& blas, float* y, const float* x, const bf16* w1, const bf16* w3, const bf16* w2, int m,
                    int dim, int hidden, float* scratch_f32, bf16* scratch_bf16) {
    if (m <= 0) return;
    float* h1 = scratch_f32;                     // (m, hidden) x W1^T, then silu(.) * h3
    float* h3 = scratch_f32 + long(m) * hidden;  // (m, hidden) x W3^T
    gpu_f32_to_bf16(scratch_bf16, x, long(m) * dim, blas.stream());
    gpu_matmul_bf16(blas, h1, scratch_bf16, w1, m, hidden, dim);
    gpu_matmul_bf16(blas, h3, scratch_bf16, w3, m, hidden, dim);
    gpu_silu_mul(h1, h3, long(m) * hidden, blas.stream());
    gpu_f32_to_bf16(scratch_bf16, h1, long(m) * hidden, blas.stream());
    gpu_matmul_bf16(blas, y, scratch_bf16, w2, m, dim, hidden);
}
