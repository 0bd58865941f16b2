// The key bytes of a routed domain's remote_buffer: the remote_buffer each
// of its provider domains made for the same memory, so that a peer reaches
// it over whichever provider routes to it.
//   u8 count, then count x { u8 sub (index in the owner's address blob)
//     u16 provider  u64 address  u64 owner  u64 epoch  u64 seal
//     u16 key size  key bytes }
// Range, rights and memory location are the routed buffer's own (each
// provider registered the same range with the same rights). The routed
// buffer is sealed by the routed domain over all of this; each entry stays
// sealed by its provider, which checks its own seal when it is used.
#pragma once

#include <fabrix/detail/little_endian.hpp>
#include <fabrix/remote_buffer.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace fabrix::detail {

inline constexpr std::size_t routed_key_entry_fixed = 1 + 2 + 8 + 8 + 8 + 8 + 2;

// Appends `sub` as entry `index` to `routed`'s key (count byte included);
// false, nothing changed, when it does not fit remote_buffer::max_key_size.
inline bool append_routed_key(remote_buffer& routed, std::uint8_t index, const remote_buffer& sub) noexcept {
  const std::size_t base = routed.key_size == 0 ? 1 : routed.key_size;
  const std::size_t need = routed_key_entry_fixed + sub.key_size;
  if (base + need > remote_buffer::max_key_size) return false;
  le_writer w(routed.key.data() + base);
  w.put<std::uint8_t>(index);
  w.put<std::uint16_t>(static_cast<std::uint16_t>(sub.provider));
  w.put<std::uint64_t>(sub.address);
  w.put<std::uint64_t>(sub.owner);
  w.put<std::uint64_t>(sub.epoch);
  w.put<std::uint64_t>(sub.seal);
  w.put<std::uint16_t>(sub.key_size);
  w.put_bytes(sub.key.data(), sub.key_size);
  routed.key[0] = static_cast<std::byte>(static_cast<std::uint8_t>(routed.key[0]) + 1);
  routed.key_size = static_cast<std::uint16_t>(base + need);
  return true;
}

// The remote_buffer of entry `index` in `routed`'s key, into `out`; false
// when there is none or the key bytes are malformed. Bounds-checked: a
// forged key never makes it read past key_size.
inline bool routed_sub_buffer(const remote_buffer& routed, std::uint8_t index, remote_buffer& out) noexcept {
  const std::byte* p = routed.key.data();
  const std::size_t size = routed.key_size;
  if (size < 1) return false;
  const auto count = static_cast<std::uint8_t>(p[0]);
  std::size_t at = 1;
  for (unsigned i = 0; i < count; ++i) {
    if (size - at < routed_key_entry_fixed) return false;
    const std::byte* e = p + at;
    const auto key_size = load_le<std::uint16_t>(e + routed_key_entry_fixed - 2);
    if (size - at - routed_key_entry_fixed < key_size) return false;
    if (static_cast<std::uint8_t>(e[0]) == index) {
      out.provider = static_cast<provider_id>(load_le<std::uint16_t>(e + 1));
      out.address = load_le<std::uint64_t>(e + 3);
      out.owner = load_le<std::uint64_t>(e + 11);
      out.epoch = load_le<std::uint64_t>(e + 19);
      out.seal = load_le<std::uint64_t>(e + 27);
      out.rights = routed.rights;
      out.location = routed.location;
      out.length = routed.length;
      out.key_size = key_size;
      std::memcpy(out.key.data(), e + routed_key_entry_fixed, key_size);
      std::memset(out.key.data() + key_size, 0, remote_buffer::max_key_size - key_size);
      return true;
    }
    at += routed_key_entry_fixed + key_size;
  }
  return false;
}

}  // namespace fabrix::detail
