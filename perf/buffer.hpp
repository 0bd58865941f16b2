// The memory fabrix-perf registers. Host memory is page-aligned anonymous
// memory, allocated once per run (never per operation).
//
// GPU seam: --mem cuda[:N] needs a device allocation and a way for the data
// checks to see device bytes (a staging copy). This build has no fabrix CUDA
// helper API yet, so allocate() refuses cuda memory with a clear message;
// when one exists, allocate it here and give `buffer` a copy-to-host for
// the checks — nothing else in fabrix-perf touches the bytes directly.
#pragma once

#include <fabrix/memory.hpp>

#include <sys/mman.h>

#include <cstddef>
#include <string>
#include <utility>

namespace fabrix::perf {

class buffer {
 public:
  buffer() = default;
  buffer(buffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)), where_(o.where_) {}
  buffer& operator=(buffer&& o) noexcept {
    if (this != &o) {
      release();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
      where_ = o.where_;
    }
    return *this;
  }
  ~buffer() { release(); }

  // Empty buffer and a message when the memory cannot be had.
  static buffer allocate(memory_location where, std::size_t size, std::string& error) {
    buffer b;
    if (where.kind != memory_kind::host) {
      error =
          "--mem cuda: fabrix-perf has no GPU memory helper in this build (the CUDA helper API of the "
          "'GPU memory and CUDA IPC' work is not merged); use --mem host";
      return b;
    }
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      error = "cannot allocate " + std::to_string(size) + " bytes of host memory";
      return b;
    }
    b.data_ = static_cast<std::byte*>(p);
    b.size_ = size;
    b.where_ = where;
    return b;
  }

  std::byte* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  memory_location where() const noexcept { return where_; }
  explicit operator bool() const noexcept { return data_ != nullptr; }

 private:
  void release() noexcept {
    if (data_) ::munmap(data_, size_);
    data_ = nullptr;
  }
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  memory_location where_{};
};

}  // namespace fabrix::perf
