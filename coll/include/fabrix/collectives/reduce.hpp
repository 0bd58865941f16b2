// Element types and reduction operators of the collectives, and the local
// kernels that copy and combine chunks.
//
// Every local data movement of a collective goes through a kernel set:
// host_kernels here for host memory, or detail::device_adapter over a
// device_kernels (device_kernels.hpp) when the communicator's memory is on a
// device. Both have copy, combine and ready(); host work is done when the
// call returns, so ready() has nothing to wait for.
#pragma once

#include <fabrix/result.hpp>

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
  static result<void> ready() noexcept { return {}; }
};

}  // namespace fabrix::coll
