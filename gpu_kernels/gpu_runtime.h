// The CUDA runtime as this project uses it: device selection, device and
// pinned host memory, streams, events and copies, each an RAII type or a
// checked free function. Every call is checked; a failure throws GpuError
// naming the call, file and line and the CUDA error. No CUDA header is
// needed to include this one. Declared in every build, defined only when
// built with CUDA: include it only from CUDA-only sources.
#pragma once
#include <cstddef>
#include <stdexcept>
#include <string>

#include "gpu_kernels/gpu_kernels.h"

using GpuEventHandle = struct CUevent_st*;

// A failed CUDA or cuBLAS call (what(): "<call> failed at <file>:<line>: <error>").
struct GpuError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// Makes device `index` current for the calling thread.
void gpu_set_device(int index);
// Free and total memory of the current device, in bytes.
void gpu_mem_info(size_t* free_bytes, size_t* total_bytes);
// Blocks until the current device has finished all work.
void gpu_synchronize();

// Owned memory of one kind: DEVICE (cudaMalloc) or PINNED, page-locked
// host memory (cudaHostAlloc) that copies run from asynchronously at full
// bandwidth. Move-only; freed on destruction.
enum class GpuMemoryKind { DEVICE, PINNED };

template <GpuMemoryKind KIND>
class GpuMemory {
public:
    GpuMemory() = default;
    explicit GpuMemory(size_t bytes);
    ~GpuMemory();
    GpuMemory(GpuMemory&& o) noexcept;
    GpuMemory& operator=(GpuMemory&& o) noexcept;
    GpuMemory(const GpuMemory&) = delete;
    GpuMemory& operator=(const GpuMemory&) = delete;
    void* data() const { return data_; }
    template <class T> T* as() const { return static_cast<T*>(data_); }
    size_t bytes() const { return bytes_; }

private:
    void* data_ = nullptr;
    size_t bytes_ = 0;
};
using GpuBuffer = GpuMemory<GpuMemoryKind::DEVICE>;
using PinnedBuffer = GpuMemory<GpuMemoryKind::PINNED>;

// Existing host memory (e.g. a read-only file mapping) page-locked in place
// with cudaHostRegister (cudaHostRegisterReadOnly when read_only), so the
// device copies straight from it. Move-only; unregistered on destruction.
class HostRegistration {
public:
    HostRegistration() = default;
    HostRegistration(const void* data, size_t bytes, bool read_only);
    ~HostRegistration();
    HostRegistration(HostRegistration&& o) noexcept;
    HostRegistration& operator=(HostRegistration&& o) noexcept;
    HostRegistration(const HostRegistration&) = delete;
    HostRegistration& operator=(const HostRegistration&) = delete;

private:
    void* data_ = nullptr;
};

// A non-blocking stream. Move-only; destroyed after synchronising.
class GpuStreamOwner {
public:
    GpuStreamOwner();
    ~GpuStreamOwner();
    GpuStreamOwner(const GpuStreamOwner&) = delete;
    GpuStreamOwner& operator=(const GpuStreamOwner&) = delete;
    GpuStream get() const { return stream_; }
    void synchronize() const;

private:
    GpuStream stream_ = nullptr;
};

// An event; timing enables cudaEventElapsedTime. Not copyable.
class GpuEvent {
public:
    explicit GpuEvent(bool timing = false);
    ~GpuEvent();
    GpuEvent(const GpuEvent&) = delete;
    GpuEvent& operator=(const GpuEvent&) = delete;
    GpuEventHandle get() const { return event_; }
    void record(GpuStream stream);
    void synchronize() const;                   // host waits for it
    bool done() const;                          // cudaEventQuery
    float ms_since(const GpuEvent& start) const;  // both timing events, both complete

private:
    GpuEventHandle event_ = nullptr;
};

// stream waits (on the device) until event has completed.
void gpu_stream_wait(GpuStream stream, const GpuEvent& event);

// Asynchronous copies on a stream (host memory pinned or registered for
// true asynchrony; pageable host memory works but the call then blocks).
void gpu_copy_h2d(void* dst, const void* src, size_t bytes, GpuStream stream);
void gpu_copy_d2h(void* dst, const void* src, size_t bytes, GpuStream stream);
void gpu_copy_d2d(void* dst, const void* src, size_t bytes, GpuStream stream);
void gpu_memset(void* dst, int value, size_t bytes, GpuStream stream);

// fn(arg) on a CUDA driver thread once the stream's earlier work is done
// (cudaLaunchHostFunc); fn must not call CUDA.
void gpu_launch_host_func(GpuStream stream, void (*fn)(void*), void* arg);
