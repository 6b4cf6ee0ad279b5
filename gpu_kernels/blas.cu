// GEMMs through cuBLAS (bf16 inputs, fp32 accumulation and output), over
// bf16 weights or block-quantized ones (quant.cu: GEMV in place for few
// tokens, dequantized pieces for many), and the SwiGLU expert built from them.
//
// Row-major to cuBLAS's column-major: a row-major (r, c) matrix is the
// column-major (c, r) matrix with leading dimension c. Y (m, n) = X (m, k)
// @ W (n, k)^T, read column-major, is C (n, m) = op(A) (n, k) * B (k, m)
// with A = W seen as column-major (k, n), ld k, op = transpose; B = X seen
// as column-major (k, m), ld k; C = Y seen as column-major (n, m), ld n.
#include <algorithm>
#include <stdexcept>
#include <string>

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

namespace {

// Y (m, n) row-major with rows ldy apart = X (m, k) @ W (n, k)^T, bf16 in.
void gemm_bf16(GpuBlas& blas, float* y, int ldy, const bf16* x, const bf16* w, int m, int n, int k) {
    const float alpha = 1.0f, beta = 0.0f;
    CUBLAS_CHECK(cublasGemmEx(blas.handle(), CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, w, CUDA_R_16BF, k, x,
                              CUDA_R_16BF, k, &beta, y, CUDA_R_32F, ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace

void gpu_matmul_bf16(GpuBlas& blas, float* y, const bf16* x, const bf16* w, int m, int n, int k) {
    if (m <= 0 || n <= 0) return;
    gemm_bf16(blas, y, n, x, w, m, n, k);
}

// Quantized W above the GEMV rows: pieces of W's rows dequantized into s.w,
// each piece's GEMM writing its columns of Y (rows of Y stay n apart). The
// pieces run in stream order, so s.w is never overwritten while read.
void gpu_matmul(GpuBlas& blas, float* y, const float* x, const WeightView& w, int m, const GpuGemmScratch& s) {
    const int n = int(w.rows), k = int(w.cols);
    if (m <= 0 || n <= 0) return;
    if (w.type == DType::BF16) {
        gpu_f32_to_bf16(s.x, x, long(m) * k, blas.stream());
        return gemm_bf16(blas, y, n, s.x, static_cast<const bf16*>(w.data), m, n, k);
    }
    if (!dtype_quantized(w.type))
        throw std::invalid_argument(std::string("gpu_matmul: ") + dtype_name(w.type) + " weights are not read on the GPU");
    if (m <= GPU_QUANT_GEMV_MAX_M) return gpu_matvec_quant(y, x, w, m, blas.stream());
    if (!s.w || s.w_elems < size_t(k))
        throw std::invalid_argument("gpu_matmul: no dequantization scratch for " + std::to_string(m) + " rows of " +
                                    dtype_name(w.type) + " weights");
    gpu_f32_to_bf16(s.x, x, long(m) * k, blas.stream());
    const int piece = int(std::min<size_t>(s.w_elems / size_t(k), size_t(n)));
    for (int r = 0; r < n; r += piece) {
        const int c = std::min(piece, n - r);
        gpu_dequant_bf16(s.w, w, r, r + c, blas.stream());
        gemm_bf16(blas, y + r, n, s.x, s.w, m, c, k);
    }
}

void gpu_expert_ffn(GpuBlas& blas, float* y, const float* x, const WeightView& w1, const WeightView& w3,
                    const WeightView& w2, int m, float* scratch_f32, const GpuGemmScratch& s, const FfnSpec& spec) {
    if (m <= 0) return;
    const long hidden = w1.rows;
    float* h1 = scratch_f32;              // (m, hidden) x W1^T, then the gate's activation
    float* h3 = scratch_f32 + m * hidden;  // (m, hidden) x W3^T
    gpu_matmul(blas, h1, x, w1, m, s);
    gpu_matmul(blas, h3, x, w3, m, s);
    gpu_ffn_gate(h1, h3, spec.b1, spec.b3, m, int(hidden), spec.act, blas.stream());
    gpu_matmul(blas, y, h1, w2, m, s);
    if (spec.b2) gpu_add_bias(y, spec.b2, m, int(w2.rows), blas.stream());
}
