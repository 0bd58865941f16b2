// Element types and reduction operators of the collectives, and the local
// kernels that copy and combine chunks.
//
// GPU seam: every local data movement of a collective goes through
// host_kernels::copy / combine. Buffers in cuda_device memory need a kernel
// set that runs on the device (cudaMemcpyAsync and a reduction kernel on a
// stream) — not built yet: the collectives refuse a memory_location that is
// not host with status::unsupported.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace fabrix::coll {

enum class reduce_op : std::uint8_t { sum, min, max };

constexpr std::string_view to_string(reduce_op op) noexcept {
  switch (op) {
    case reduce_op::sum: return "sum";
    case reduce_op::min: return "min";
    case reduce_op::max: return "max";
  }
  return "unknown";
}

// The element types the reductions are defined for.
template <class T>
concept element =
    std::same_as<T, std::int32_t> || std::same_as<T, std::int64_t> || std::same_as<T, float> || std::same_as<T, double>;

// Host memory: plain loops the compiler vectorises.
struct host_kernels {
  static void copy(void* dst, const void* src, std::size_t bytes) noexcept {
    if (bytes != 0 && dst != src) std::memmove(dst, src, bytes);
  }
  // out[i] = a[i] op b[i]; out may alias a or b.
  template <element T>
  static void combine(T* out, const T* a, const T* b, std::size_t n, reduce_op op) noexcept {
    switch (op) {
      case reduce_op::sum:
        for (std::size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
        break;
      case reduce_op::min:
        for (std::size_t i = 0; i < n; ++i) out[i] = std::min(a[i], b[i]);
        break;
      case reduce_op::max:
        for (std::size_t i = 0; i < n; ++i) out[i] = std::max(a[i], b[i]);
        break;
    }
  }
};

}  // namespace fabrix::coll
