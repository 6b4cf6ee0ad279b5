// gpu_runtime.h over the CUDA runtime: every call checked.
#include <utility>

#include "gpu_kernels/cuda_check.h"
#include "gpu_kernels/gpu_runtime.h"

void gpu_set_device(int index) { CUDA_CHECK(cudaSetDevice(index)); }

void gpu_mem_info(size_t* free_bytes, size_t* total_bytes) { CUDA_CHECK(cudaMemGetInfo(free_bytes, total_bytes)); }

void gpu_synchronize() { CUDA_CHECK(cudaDeviceSynchronize()); }

namespace {

template <GpuMemoryKind KIND>
void memory_free(void* p) {
    // A destructor must not throw; nothing to do on failure.
    if (!p) return;
    if constexpr (KIND == GpuMemoryKind::DEVICE)
        cudaFree(p);
    else
        cudaFreeHost(p);
}

}  // namespace

template <GpuMemoryKind KIND>
GpuMemory<KIND>::GpuMemory(size_t bytes) : bytes_(bytes) {
    if (bytes == 0) return;
    if constexpr (KIND == GpuMemoryKind::DEVICE)
        CUDA_CHECK(cudaMalloc(&data_, bytes));
    else
        CUDA_CHECK(cudaHostAlloc(&data_, bytes, cudaHostAllocDefault));
}

template <GpuMemoryKind KIND>
GpuMemory<KIND>::~GpuMemory() {
    memory_free<KIND>(data_);
}

template <GpuMemoryKind KIND>
GpuMemory<KIND>::GpuMemory(GpuMemory&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

template <GpuMemoryKind KIND>
GpuMemory<KIND>& GpuMemory<KIND>::operator=(GpuMemory&& o) noexcept {
    if (this != &o) {
        memory_free<KIND>(data_);
        data_ = std::exchange(o.data_, nullptr);
        bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
}

template class GpuMemory<GpuMemoryKind::DEVICE>;
template class GpuMemory<GpuMemoryKind::PINNED>;

HostRegistration::HostRegistration(const void* data, size_t bytes, bool read_only) {
    unsigned flags = cudaHostRegisterDefault | (read_only ? cudaHostRegisterReadOnly : 0u);
    CUDA_CHECK(cudaHostRegister(const_cast<void*>(data), bytes, flags));
    data_ = const_cast<void*>(data);
}

HostRegistration::~HostRegistration() {
    if (data_) cudaHostUnregister(data_);
}

HostRegistration::HostRegistration(HostRegistration&& o) noexcept : data_(std::exchange(o.data_, nullptr)) {}

HostRegistration& HostRegistration::operator=(HostRegistration&& o) noexcept {
    if (this != &o) {
        if (data_) cudaHostUnregister(data_);
        data_ = std::exchange(o.data_, nullptr);
    }
    return *this;
}

GpuStreamOwner::GpuStreamOwner() { CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }

GpuStreamOwner::~GpuStreamOwner() {
    if (stream_) {
        cudaStreamSynchronize(stream_);
        cudaStreamDestroy(stream_);
    }
}

void GpuStreamOwner::synchronize() const { CUDA_CHECK(cudaStreamSynchronize(stream_)); }

GpuEvent::GpuEvent(bool timing) {
    CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}

GpuEvent::~GpuEvent() {
    if (event_) cudaEventDestroy(event_);
}

void GpuEvent::record(GpuStream stream) { CUDA_CHECK(cudaEventRecord(event_, stream)); }

void GpuEvent::synchronize() const { CUDA_CHECK(cudaEventSynchronize(event_)); }

bool GpuEvent::done() const {
    cudaError_t err = cudaEventQuery(event_);
    if (err == cudaErrorNotReady) {
        cudaGetLastError();  // not an error: clear it
        return false;
    }
    CUDA_CHECK(err);
    return true;
}

float GpuEvent::ms_since(const GpuEvent& start) const {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, event_));
    return ms;
}

void gpu_stream_wait(GpuStream stream, const GpuEvent& event) { CUDA_CHECK(cudaStreamWaitEvent(stream, event.get(), 0)); }

void gpu_copy_h2d(void* dst, const void* src, size_t bytes, GpuStream stream) {
    if (bytes > 0) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
}

void gpu_copy_d2h(void* dst, const void* src, size_t bytes, GpuStream stream) {
    if (bytes > 0) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream));
}

void gpu_copy_d2d(void* dst, const void* src, size_t bytes, GpuStream stream) {
    if (bytes > 0) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
}

void gpu_memset(void* dst, int value, size_t bytes, GpuStream stream) {
    if (bytes > 0) CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, stream));
}

void gpu_launch_host_func(GpuStream stream, void (*fn)(void*), void* arg) {
    CUDA_CHECK(cudaLaunchHostFunc(stream, fn, arg));
}
