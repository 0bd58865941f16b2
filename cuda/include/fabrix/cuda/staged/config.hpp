// How a staged domain stages cuda_device memory: the size of one bounce
// chunk, how many chunks one operation keeps in flight (its slots), and how
// many staged operations run at once (each owns its own slots). The pinned
// bounce memory is chunk × depth × operations bytes, allocated and
// registered with the network provider once, when the domain is created.
//
// from_env() reads FABRIX_STAGING_CHUNK (bytes; k/m/g suffixes),
// FABRIX_STAGING_DEPTH, FABRIX_STAGING_OPS and FABRIX_STAGING_DEVICE (the
// CUDA ordinal whose stream does the copies). Needs no CUDA headers.
#pragma once

#include <fabrix/detail/env.hpp>
#include <fabrix/result.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace fabrix::cuda {

struct staging_config {
  std::size_t chunk = std::size_t{512} << 10;  // bytes per slot; a multiple of 64
  unsigned depth = 4;                          // slots per operation (>= 2 for copy/transfer overlap)
  unsigned operations = 4;                     // staged operations in flight per domain
  int device = 0;                              // CUDA ordinal of the copy stream

  std::size_t slots() const noexcept { return static_cast<std::size_t>(depth) * operations; }
  std::size_t bounce_bytes() const noexcept { return chunk * slots(); }

  // ok, or why these values are refused.
  result<staging_config> checked() const {
    if (chunk == 0 || chunk % 64 != 0 || chunk > (std::size_t{1} << 30))
      return unexpected(status::invalid_argument, "staging chunk must be a multiple of 64 in (0, 1 GiB]", "staging");
    if (depth == 0 || depth > 64) return unexpected(status::invalid_argument, "staging depth must be 1..64", "staging");
    if (operations == 0 || operations > 256)
      return unexpected(status::invalid_argument, "staging operations must be 1..256", "staging");
    if (bounce_bytes() > (std::size_t{4} << 30))
      return unexpected(status::invalid_argument, "staging bounce memory would exceed 4 GiB", "staging");
    if (device < 0) return unexpected(status::invalid_argument, "staging device must be >= 0", "staging");
    return *this;
  }

  static result<staging_config> from_env() {
    staging_config c;
    std::string why;
    constexpr long long most = 1ll << 40;  // checked() bounds each value
    if (!fabrix::detail::env_number("FABRIX_STAGING_CHUNK", c.chunk, 0, most, why, /*sizes=*/true) ||
        !fabrix::detail::env_number("FABRIX_STAGING_DEPTH", c.depth, 0, most, why) ||
        !fabrix::detail::env_number("FABRIX_STAGING_OPS", c.operations, 0, most, why) ||
        !fabrix::detail::env_number("FABRIX_STAGING_DEVICE", c.device, 0, 1 << 16, why))
      return unexpected(status::invalid_argument, why, "staging");
    return c.checked();
  }
};

}  // namespace fabrix::cuda
