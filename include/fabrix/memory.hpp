// What a registration holds and what peers may do with it.
#pragma once

#include <fabrix/detail/wire_names.hpp>

#include <cstdint>
#include <string_view>

namespace fabrix {

// Where the bytes of a buffer live. Every registration says what it holds.
// Travels in remote_buffers. Like provider_id the set is open: host and
// cuda_device have fixed numbers, any other kind is memory_kind_of(its name)
// and is known to a process once registered (registry.hpp).
enum class memory_kind : std::uint8_t {
  host = 0,
  cuda_device = 1,
};

// Numbers below this one are reserved for kinds named in fabrix itself.
inline constexpr std::uint8_t first_hashed_memory_kind = 0x10;

namespace detail {
inline constexpr wire_name builtin_memory_kind_names[] = {
    {static_cast<std::uint16_t>(memory_kind::host), "host"},
    {static_cast<std::uint16_t>(memory_kind::cuda_device), "cuda_device"},
};
}  // namespace detail

// The wire number of the memory kind called `name`. An 8-bit hash: two names
// may share a number; register_memory_kind() refuses the second in a process.
constexpr memory_kind memory_kind_of(std::string_view name) noexcept {
  return static_cast<memory_kind>(
      detail::wire_number_of(detail::builtin_memory_kind_names, first_hashed_memory_kind, 0x100, name));
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
