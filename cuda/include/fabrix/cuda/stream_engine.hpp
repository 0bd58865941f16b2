// The real copy engine for staging_pipeline: cudaMemcpyAsync on one stream,
// a pre-created event per slot, cudaEventQuery as the copy's state. Also
// pinned_buffer, page-locked host memory for the bounce slots.
#pragma once

#include <fabrix/cuda/pointer.hpp>
#include <fabrix/cuda/runtime.hpp>
#include <fabrix/result.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

namespace fabrix::cuda {

// Page-locked host memory (cudaHostAlloc, portable: usable from every device).
class pinned_buffer {
 public:
  static result<pinned_buffer> create(std::size_t size) {
    void* p = nullptr;
    if (cudaError_t e = cudaHostAlloc(&p, size, cudaHostAllocPortable); e != cudaSuccess)
      return cuda_fail(e, "cudaHostAlloc(" + std::to_string(size) + ")");
    return pinned_buffer(static_cast<std::byte*>(p), size);
  }
  pinned_buffer(pinned_buffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), size_(o.size_) {}
  pinned_buffer& operator=(pinned_buffer&& o) noexcept {
    if (this != &o) {
      if (p_) cudaFreeHost(p_);
      p_ = std::exchange(o.p_, nullptr);
      size_ = o.size_;
    }
    return *this;
  }
  pinned_buffer(const pinned_buffer&) = delete;
  pinned_buffer& operator=(const pinned_buffer&) = delete;
  ~pinned_buffer() {
    if (p_) cudaFreeHost(p_);
  }
  std::span<std::byte> bytes() const noexcept { return {p_, size_}; }

 private:
  pinned_buffer(std::byte* p, std::size_t n) : p_(p), size_(n) {}
  std::byte* p_ = nullptr;
  std::size_t size_ = 0;
};

class stream_copy_engine {
 public:
  // For the staged adapter (staged/engine.hpp): bounce slots live in pinned memory.
  using host_memory = pinned_buffer;
  static result<pinned_buffer> allocate_host(std::size_t bytes) { return pinned_buffer::create(bytes); }
  // The staged adapter's check_host_memory: device memory passed as host.
  static result<void> check_host_memory(const void* addr, std::string_view provider) {
    return refuse_device_memory_as_host(addr, provider);
  }

  static result<stream_copy_engine> create(int device, unsigned slots) {
    device_guard on(device);
    stream_copy_engine e;
    e.device_ = device;
    if (cudaError_t r = cudaStreamCreateWithFlags(&e.stream_, cudaStreamNonBlocking); r != cudaSuccess)
      return cuda_fail(r, "cudaStreamCreateWithFlags");
    e.events_.resize(slots, nullptr);
    for (auto& ev : e.events_)
      if (cudaError_t r = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming); r != cudaSuccess)
        return cuda_fail(r, "cudaEventCreateWithFlags");
    return e;
  }
  stream_copy_engine(stream_copy_engine&& o) noexcept
      : device_(o.device_), stream_(std::exchange(o.stream_, nullptr)), events_(std::move(o.events_)) {}
  stream_copy_engine& operator=(stream_copy_engine&&) = delete;
  stream_copy_engine(const stream_copy_engine&) = delete;
  ~stream_copy_engine() {
    device_guard on(device_);
    if (stream_) cudaStreamSynchronize(stream_);
    for (auto ev : events_)
      if (ev) cudaEventDestroy(ev);
    if (stream_) cudaStreamDestroy(stream_);
  }

  status start_copy(unsigned slot, void* dst, const void* src, std::size_t n) {
    if (slot >= events_.size()) return status::invalid_argument;
    device_guard on(device_);
    if (cudaError_t e = cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, stream_); e != cudaSuccess) return to_status(e);
    return to_status(cudaEventRecord(events_[slot], stream_));
  }
  status copy_state(unsigned slot) {
    if (slot >= events_.size()) return status::invalid_argument;
    return to_status(cudaEventQuery(events_[slot]));  // cudaErrorNotReady -> in_progress
  }
  cudaStream_t stream() const noexcept { return stream_; }

 private:
  stream_copy_engine() = default;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  std::vector<cudaEvent_t> events_;
};

}  // namespace fabrix::cuda
