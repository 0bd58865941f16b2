// A copy engine for the staged adapter with host memory standing in for
// device memory: memcpy, but each copy reports in_progress on its first
// state query (so the adapter's waiting paths run), and a copy touching the
// poisoned range fails asynchronously (copy_state returns provider_error),
// as a failed cudaMemcpyAsync would.
#pragma once

#include <fabrix/cuda/staged/engine.hpp>
#include <fabrix/result.hpp>

#include <cstddef>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

namespace fxt {

struct test_engine {
  struct host_memory {
    std::unique_ptr<std::byte[]> p;
    std::size_t n = 0;
    std::span<std::byte> bytes() const { return {p.get(), n}; }
  };
  static fabrix::result<test_engine> create(int, unsigned slots) {
    test_engine e;
    e.slots_.assign(slots, slot{});
    return e;
  }
  static fabrix::result<host_memory> allocate_host(std::size_t n) {
    return host_memory{std::make_unique<std::byte[]>(n), n};
  }

  fabrix::status start_copy(unsigned s, void* dst, const void* src, std::size_t n) {
    if (s >= slots_.size()) return fabrix::status::invalid_argument;
    const bool bad = touches_poison(dst, n) || touches_poison(src, n);
    if (!bad && n) std::memcpy(dst, src, n);
    slots_[s] = {1, bad};
    ++copies;
    return fabrix::status::ok;
  }
  fabrix::status copy_state(unsigned s) {
    if (s >= slots_.size()) return fabrix::status::invalid_argument;
    if (slots_[s].pending > 0) {
      --slots_[s].pending;
      return fabrix::status::in_progress;
    }
    return slots_[s].failed ? fabrix::status::provider_error : fabrix::status::ok;
  }

  // Copies into or out of [poison_begin, poison_end) fail.
  static inline const std::byte* poison_begin = nullptr;
  static inline const std::byte* poison_end = nullptr;
  static inline std::size_t copies = 0;

 private:
  struct slot {
    unsigned pending = 0;
    bool failed = false;
  };
  static bool touches_poison(const void* p, std::size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    return poison_begin != nullptr && b < poison_end && b + n > poison_begin;
  }
  std::vector<slot> slots_;
};

static_assert(fabrix::cuda::staging_engine<test_engine>);

}  // namespace fxt
