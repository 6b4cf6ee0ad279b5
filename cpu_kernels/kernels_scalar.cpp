// Scalar path: the reference every other ISA path is tested against, and the
// fallback on CPUs without AVX2. Plain loops; fp32 accumulation.
#include "cpu_kernels/isa.h"

namespace {

void matmul_bf16_rows_scalar(float* y, const float* x, const bf16* w, int m, int n, int k, int r0, int r1) {
    for (int r = r0; r < r1; r++) {
        const bf16* wr = w + long(r) * k;
        for (int i = 0; i < m; i++) {
            const float* xi = x + long(i) * k;
            float acc = 0.0f;
            for (int j = 0; j < k; j++) acc += bf16_to_f32(wr[j]) * xi[j];
            y[long(i) * n + r] = acc;
        }
    }
}

float dot_f32_scalar(const float* a, const float* b, int n) {
    float acc = 0.0f;
    for (int i = 0; i < n; i++) acc += a[i] * b[i];
    return acc;
}

void axpy_f32_scalar(float* y, float a, const float* x, int n) {
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}

}  // namespace

const KernelTable& kernel_table_scalar() {
    static const KernelTable table{matmul_bf16_rows_scalar, dot_f32_scalar, axpy_f32_scalar};
    return table;
}
