// MoE routing on the device: one thread per token applies gm_route_row
// (softmax over the experts, top k, renormalised) to its row of router
// logits. Kernel first, launcher after.
#include <string>

#include "gpu_kernels/cuda_check.h"
#include "gpu_kernels/gpu_kernels.h"
#include "gpu_kernels/gpu_math.h"

namespace {

constexpr int THREADS = 128;

__global__ void route_topk_kernel(int* experts, float* weights, const float* logits, int rows, int n_experts, int k,
                                  bool renorm) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    gm_route_row(experts + long(row) * k, weights + long(row) * k, logits + long(row) * n_experts, n_experts, k,
                 renorm);
}

}  // namespace

void gpu_route_topk(int* experts, float* weights, const float* logits, int rows, int n_experts, int k, bool renorm,
                    GpuStream stream) {
    if (rows <= 0) return;
    if (k < 1 || k > GM_MAX_TOP_K || k > n_experts)
        throw GpuError("gpu_route_topk: top-k " + std::to_string(k) + " of " + std::to_string(n_experts) +
                       " experts is outside 1.." + std::to_string(GM_MAX_TOP_K));
    route_topk_kernel<<<unsigned((rows + THREADS - 1) / THREADS), THREADS, 0, stream>>>(experts, weights, logits, rows,
                                                                                        n_experts, k, renorm);
    CUDA_LAUNCH_CHECK();
}
