// The libfabric domain's address blob — what connect() takes from a peer:
//   "FBXF" u16 version  u64 nonce  u64 node  u32 pid  u64 start_time
//   u8[16] secret  u32 length  + the endpoint name from fi_getname (length bytes)
// The secret seals the peer's remote_buffers (see remote_buffer.hpp); it
// travels only in this blob, i.e. over the bootstrap.
#pragma once

#include <fabrix/detail/little_endian.hpp>
#include <fabrix/detail/process_identity.hpp>
#include <fabrix/detail/siphash.hpp>
#include <fabrix/result.hpp>

#include <cstring>
#include <span>
#include <vector>

namespace fabrix::ofi::detail {

struct peer_address {
  std::uint64_t nonce = 0;
  fabrix::detail::process_identity process;
  fabrix::detail::seal_key secret{};
  std::span<const std::byte> name;  // fi_getname bytes; points into the parsed blob
};

inline constexpr std::size_t address_header = 54;
inline constexpr std::uint16_t address_version = 1;
inline constexpr std::size_t max_name_size = 4096;

inline std::vector<std::byte> encode_address(const peer_address& a) {
  std::vector<std::byte> blob(address_header + a.name.size());
  fabrix::detail::le_writer w(blob.data());
  w.put_bytes(reinterpret_cast<const std::byte*>("FBXF"), 4);
  w.put<std::uint16_t>(address_version);
  w.put<std::uint64_t>(a.nonce);
  w.put<std::uint64_t>(a.process.node);
  w.put<std::uint32_t>(a.process.pid);
  w.put<std::uint64_t>(a.process.start_time);
  w.put_bytes(reinterpret_cast<const std::byte*>(a.secret.data()), a.secret.size());
  w.put<std::uint32_t>(static_cast<std::uint32_t>(a.name.size()));
  w.put_bytes(a.name.data(), a.name.size());
  return blob;
}

// Refuses anything but a complete blob of this version (invalid_argument).
// Never reads outside `blob`.
inline result<peer_address> parse_address(std::span<const std::byte> blob) {
  if (blob.size() < address_header || std::memcmp(blob.data(), "FBXF", 4) != 0)
    return unexpected(status::invalid_argument, "not a fabrix libfabric address blob", "ofi");
  fabrix::detail::le_reader r(blob.data() + 4);
  if (r.get<std::uint16_t>() != address_version)
    return unexpected(status::invalid_argument, "libfabric address blob of another version", "ofi");
  peer_address a;
  a.nonce = r.get<std::uint64_t>();
  a.process.node = r.get<std::uint64_t>();
  a.process.pid = r.get<std::uint32_t>();
  a.process.start_time = r.get<std::uint64_t>();
  std::memcpy(a.secret.data(), r.position(), a.secret.size());
  r.skip(a.secret.size());
  const auto len = r.get<std::uint32_t>();
  if (len == 0 || len > max_name_size || len != blob.size() - address_header)
    return unexpected(status::invalid_argument, "libfabric address blob length does not match", "ofi");
  a.name = blob.subspan(address_header);
  return a;
}

}  // namespace fabrix::ofi::detail
