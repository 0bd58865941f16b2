// The key bytes of an ofi remote_buffer: how a peer addresses the region.
//   u8 version (2)  u8 flags  u64 libfabric key  u32 slot (little-endian)
// flags bit 0: the provider uses virtual addresses (FI_MR_VIRT_ADDR), so the
// target address of byte `off` is remote_buffer::address + off; without it
// the target address is the offset itself (offset addressing, the
// registration's base is 0). slot: the region's entry in its domain's key
// table (fabrix/detail/key_table.hpp), or no_slot. Decoding anything else —
// another size, version or unknown flags — fails; it never reads outside the
// bytes given.
#pragma once

#include <fabrix/detail/key_table.hpp>
#include <fabrix/detail/little_endian.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace fabrix::ofi::detail {

inline constexpr std::size_t key_blob_size = 14;
inline constexpr std::uint8_t key_version = 2;
// Not in the key table: not checked by peers.
inline constexpr std::uint32_t no_slot = fabrix::detail::key_table_no_slot;
inline constexpr std::uint8_t key_flag_virt_addr = 1;

struct remote_key {
  std::uint64_t key = 0;
  bool virt_addr = false;
  std::uint32_t slot = no_slot;
  // Not on the wire: the owner's key table confirms the remote_buffer's range
  // and rights (post.hpp, key_for), so shm may read it itself (local reads)
  // and, when it is host memory, fabrix may copy to and from it by CMA.
  bool confirmed = false;
  bool host = false;  // the remote_buffer says host memory (not on the wire either)

  // The address libfabric wants for byte `offset` of a region based at `base`.
  std::uint64_t target(std::uint64_t base, std::uint64_t offset) const noexcept {
    return virt_addr ? base + offset : offset;
  }
};

inline void encode_key(const remote_key& k, std::span<std::byte, key_blob_size> out) noexcept {
  out[0] = std::byte{key_version};
  out[1] = std::byte{k.virt_addr ? key_flag_virt_addr : std::uint8_t{0}};
  fabrix::detail::store_le<std::uint64_t>(out.data() + 2, k.key);
  fabrix::detail::store_le<std::uint32_t>(out.data() + 10, k.slot);
}

inline std::optional<remote_key> decode_key(std::span<const std::byte> in) noexcept {
  if (in.size() != key_blob_size || in[0] != std::byte{key_version}) return std::nullopt;
  const auto flags = static_cast<std::uint8_t>(in[1]);
  if ((flags & ~key_flag_virt_addr) != 0) return std::nullopt;
  return remote_key{fabrix::detail::load_le<std::uint64_t>(in.data() + 2), (flags & key_flag_virt_addr) != 0,
                    fabrix::detail::load_le<std::uint32_t>(in.data() + 10)};
}

}  // namespace fabrix::ofi::detail
