// oneDNN bf16 matmul wrapper (see gemm_dnnl.h). Only this file includes
// oneDNN or OpenMP headers. Each calling thread restricts its own OpenMP team
// to one thread, so oneDNN never competes with the ThreadPool for cores.
#include "cpu_kernels/gemm_dnnl.h"

#include <cassert>

#if defined(MOE_HAVE_DNNL)
#include <omp.h>

#include <cstring>
#include <dnnl.hpp>
#include <map>
#include <tuple>

namespace {

using Key = std::tuple<int, int, int, int, int>;  // m, nc, k, x stride, y stride

struct Matmul {
    dnnl::matmul::primitive_desc pd;
    dnnl::matmul prim;
};

dnnl::matmul::primitive_desc make_desc(const dnnl::engine& eng, int m, int nc, int k, int xs, int ys) {
    using dt = dnnl::memory::data_type;
    dnnl::memory::desc src({m, k}, dt::bf16, dnnl::memory::dims{xs, 1});
    // W (nc, k) row-major is the (k, nc) weights matrix in "ba" layout.
    dnnl::memory::desc wei({k, nc}, dt::bf16, dnnl::memory::dims{1, k});
    dnnl::memory::desc dst({m, nc}, dt::f32, dnnl::memory::dims{ys, 1});
    return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, wei, dst), eng);
}

const dnnl::engine& cpu_engine() {
    static const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    return eng;
}

}  // namespace

bool dnnl_bf16_native() {
    static const bool native = [] {
        try {
            auto pd = make_desc(cpu_engine(), 64, 64, 64, 64, 64);
            const char* impl = pd.impl_info_str();
            return std::strstr(impl, "brg") && (std::strstr(impl, "bf16") || std::strstr(impl, "amx"));
        } catch (const dnnl::error&) {
            return false;
        }
    }();
    return native;
}

void dnnl_matmul_bf16_cols(float* y, const void* x, const bf16* w, int m, int n, int k, int c0, int c1) {
    assert(c0 < c1 && c1 <= n);
    static thread_local bool single = (omp_set_num_threads(1), true);
    static thread_local std::map<Key, Matmul> cache;
    static thread_local dnnl::stream stream(cpu_engine());
    (void)single;
    int nc = c1 - c0, xs = (k + 1) & ~1;
    Key key{m, nc, k, xs, n};
    auto it = cache.find(key);
    if (it == cache.end()) {
        if (cache.size() > 256) cache.clear();
        auto pd = make_desc(cpu_engine(), m, nc, k, xs, n);
        it = cache.emplace(key, Matmul{pd, dnnl::matmul(pd)}).first;
    }
    const auto& pd = it->second.pd;
    dnnl::memory src(pd.src_desc(), cpu_engine(), const_cast<void*>(x));
    dnnl::memory wei(pd.weights_desc(), cpu_engine(), const_cast<bf16*>(w + long(c0) * k));
    dnnl::memory dst(pd.dst_desc(), cpu_engine(), y + c0);
    it->second.prim.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}});
    stream.wait();
}

#else

bool dnnl_bf16_native() { return false; }

void dnnl_matmul_bf16_cols(float*, const void*, const bf16*, int, int, int, int, int) {
    assert(!"built without oneDNN");
}

#endif
