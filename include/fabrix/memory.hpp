// What a registration holds and what peers may do with it.
#pragma once

#include <cstdint>
#include <string_view>

namespace fabrix {

// Where the bytes of a buffer live. Every registration says what it holds.
enum class memory_kind : std::uint8_t {
  host = 0,
  cuda_device = 1,
};

constexpr std::string_view to_string(memory_kind k) noexcept {
  switch (k) {
    case memory_kind::host: return "host";
    case memory_kind::cuda_device: return "cuda_device";
  }
  return "unknown";
}

// A memory location: its kind plus the device ordinal for device memory.
struct memory_location {
  memory_kind kind = memory_kind::host;
  int device = 0;  // CUDA ordinal; 0 and ignored for host memory
};

// Access rights of a registration, combinable with |. Local access is always
// granted; the remote rights are what a peer holding the remote_buffer may do.
enum class access : std::uint32_t {
  local = 0,
  remote_read = 1u << 0,
  remote_write = 1u << 1,
  remote_atomic = 1u << 2,
  all_remote = remote_read | remote_write | remote_atomic,
};

constexpr access operator|(access a, access b) noexcept {
  return static_cast<access>(static_cast<std::uint32_t>(a) | static_cast<std::uint32_t>(b));
}
constexpr access operator&(access a, access b) noexcept {
  return static_cast<access>(static_cast<std::uint32_t>(a) & static_cast<std::uint32_t>(b));
}
// True when every right in `wanted` is in `granted`.
constexpr bool allows(access granted, access wanted) noexcept { return (granted & wanted) == wanted; }
constexpr bool is_known(access a) noexcept {
  return (static_cast<std::uint32_t>(a) & ~static_cast<std::uint32_t>(access::all_remote)) == 0;
}

}  // namespace fabrix
