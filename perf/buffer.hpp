// The memory fabrix-perf registers, allocated once per run (never per
// operation).
//
// host:      page-aligned anonymous memory; the host view is the memory.
// cuda[:N]:  a fabrix::cuda::device_buffer on device N (builds with CUDA
//            only) plus a host mirror of the same size. fabrix-perf never
//            touches device bytes directly: patterns are written into the
//            mirror and push()ed, and what must be checked is pull()ed into
//            the mirror first (synchronous cudaMemcpy; not on the timed path
//            of bandwidth runs, but a latency loop that polls a marker byte
//            pulls one byte per look and pushes one per message).
#pragma once

#include <fabrix/memory.hpp>

#if defined(FABRIX_HAVE_CUDA) && FABRIX_HAVE_CUDA
#include <fabrix/cuda/device_buffer.hpp>

#include <cuda_runtime_api.h>

#include <optional>
#endif

#include <sys/mman.h>

#include <cstddef>
#include <cstring>
#include <span>
#include <string>
#include <utility>

namespace fabrix::perf {

class buffer {
 public:
  buffer() = default;
  buffer(buffer&& o) noexcept { take(o); }
  buffer& operator=(buffer&& o) noexcept {
    if (this != &o) {
      release();
      take(o);
    }
    return *this;
  }
  buffer(const buffer&) = delete;
  buffer& operator=(const buffer&) = delete;
  ~buffer() { release(); }

  // Empty buffer and a message when the memory cannot be had.
  static buffer allocate(memory_location where, std::size_t size, std::string& error) {
    buffer b;
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      error = "cannot allocate " + std::to_string(size) + " bytes of host memory";
      return b;
    }
    b.host_ = static_cast<std::byte*>(p);
    b.size_ = size;
    b.where_ = where;
    if (where.kind == memory_kind::host) return b;
#if defined(FABRIX_HAVE_CUDA) && FABRIX_HAVE_CUDA
    if (std::string why = cuda_refusal(where.device); !why.empty()) {
      error = why;
      return buffer{};
    }
    auto d = cuda::device_buffer::create(size, where.device);
    if (!d) {
      error = "--mem cuda:" + std::to_string(where.device) + ": " + d.error().describe();
      return buffer{};
    }
    b.device_.emplace(std::move(*d));
    return b;
#else
    error =
        "--mem cuda: this fabrix-perf was built without CUDA (meson -Dcuda=enabled builds it with "
        "fabrix::cuda::device_buffer); use --mem host";
    return buffer{};
#endif
  }

  // Empty when --mem cuda:N can be had in this build on this machine, else why not.
  static std::string cuda_refusal([[maybe_unused]] int device) {
#if defined(FABRIX_HAVE_CUDA) && FABRIX_HAVE_CUDA
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0)
      return "--mem cuda: no CUDA device here (" +
             std::string(e == cudaSuccess ? "cudaGetDeviceCount found none" : cudaGetErrorName(e)) + ")";
    if (device >= n)
      return "--mem cuda:" + std::to_string(device) + ": there are only " + std::to_string(n) + " CUDA device(s)";
    return {};
#else
    return "--mem cuda: this fabrix-perf was built without CUDA (meson -Dcuda=enabled); use --mem host";
#endif
  }

  // What gets registered: the device memory for cuda, else the host memory.
  std::byte* data() const noexcept {
#if defined(FABRIX_HAVE_CUDA) && FABRIX_HAVE_CUDA
    if (device_) return device_->data();
#endif
    return host_;
  }
  // What fabrix-perf reads and writes: the memory itself, or the mirror.
  std::byte* host() const noexcept { return host_; }
  std::size_t size() const noexcept { return size_; }
  memory_location where() const noexcept { return where_; }
  bool on_device() const noexcept { return where_.kind != memory_kind::host; }
  explicit operator bool() const noexcept { return host_ != nullptr; }

  // Mirror -> device for [offset, offset + len); nothing for host memory.
  // Returns false when the copy failed.
  bool push([[maybe_unused]] std::size_t offset, [[maybe_unused]] std::size_t len) {
#if defined(FABRIX_HAVE_CUDA) && FABRIX_HAVE_CUDA
    if (device_) return device_->copy_from_host(offset, std::span(host_ + offset, len)) == status::ok;
#endif
    return true;
  }
  // Device -> mirror for [offset, offset + len); nothing for host memory.
  bool pull([[maybe_unused]] std::size_t offset, [[maybe_unused]] std::size_t len) {
#if defined(FABRIX_HAVE_CUDA) && FABRIX_HAVE_CUDA
    if (device_) return device_->copy_to_host(offset, std::span(host_ + offset, len)) == status::ok;
#endif
    return true;
  }

 private:
  void take(buffer& o) noexcept {
    host_ = std::exchange(o.host_, nullptr);
    size_ = std::exchange(o.size_, 0);
    where_ = o.where_;
#if defined(FABRIX_HAVE_CUDA) && FABRIX_HAVE_CUDA
    device_ = std::move(o.device_);
    o.device_.reset();
#endif
  }
  void release() noexcept {
#if defined(FABRIX_HAVE_CUDA) && FABRIX_HAVE_CUDA
    device_.reset();
#endif
    if (host_) ::munmap(host_, size_);
    host_ = nullptr;
  }

  std::byte* host_ = nullptr;
  std::size_t size_ = 0;
  memory_location where_{};
#if defined(FABRIX_HAVE_CUDA) && FABRIX_HAVE_CUDA
  std::optional<cuda::device_buffer> device_;
#endif
};

}  // namespace fabrix::perf
