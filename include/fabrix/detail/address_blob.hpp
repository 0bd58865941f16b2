// The address blob a provider domain gives the connect() of its peers, in
// the format the UCX and libfabric providers share:
//   magic[4]  u16 version  u64 nonce  u64 node  u32 pid  u64 start_time
//   u8[16] secret  u32 length  + the transport's own address (length bytes)
// A provider names its format (magic, version, what to call it in errors,
// the longest native address it accepts). The secret seals the domain's
// remote_buffers (remote_buffer.hpp); it travels only in this blob, i.e.
// over the bootstrap.
#pragma once

#include <fabrix/detail/little_endian.hpp>
#include <fabrix/detail/process_identity.hpp>
#include <fabrix/detail/siphash.hpp>
#include <fabrix/result.hpp>

#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <vector>

namespace fabrix::detail {

struct address_format {
  std::array<char, 4> magic;
  std::uint16_t version;
  const char* what;      // "UCX": "not a fabrix UCX address blob"
  const char* provider;  // error::provider
  std::size_t max_native = std::numeric_limits<std::uint32_t>::max();
};

struct peer_address {
  std::uint64_t nonce = 0;
  process_identity process;
  seal_key secret{};
  std::span<const std::byte> native;  // the transport's address; points into the parsed blob
};

inline constexpr std::size_t address_header = 54;

inline std::vector<std::byte> encode_address(const address_format& f, const peer_address& a) {
  std::vector<std::byte> blob(address_header + a.native.size());
  le_writer w(blob.data());
  w.put_bytes(reinterpret_cast<const std::byte*>(f.magic.data()), f.magic.size());
  w.put<std::uint16_t>(f.version);
  w.put<std::uint64_t>(a.nonce);
  w.put<std::uint64_t>(a.process.node);
  w.put<std::uint32_t>(a.process.pid);
  w.put<std::uint64_t>(a.process.start_time);
  w.put_bytes(reinterpret_cast<const std::byte*>(a.secret.data()), a.secret.size());
  w.put<std::uint32_t>(static_cast<std::uint32_t>(a.native.size()));
  w.put_bytes(a.native.data(), a.native.size());
  return blob;
}

// Refuses anything but a complete blob of this format and version, with a
// native address of 1..max_native bytes (invalid_argument). Never reads
// outside `blob`.
inline result<peer_address> parse_address(const address_format& f, std::span<const std::byte> blob) {
  const std::string what = f.what;
  if (blob.size() < address_header || std::memcmp(blob.data(), f.magic.data(), f.magic.size()) != 0)
    return unexpected(status::invalid_argument, "not a fabrix " + what + " address blob", f.provider);
  le_reader r(blob.data() + f.magic.size());
  if (r.get<std::uint16_t>() != f.version)
    return unexpected(status::invalid_argument, what + " address blob of another version", f.provider);
  peer_address a;
  a.nonce = r.get<std::uint64_t>();
  a.process.node = r.get<std::uint64_t>();
  a.process.pid = r.get<std::uint32_t>();
  a.process.start_time = r.get<std::uint64_t>();
  std::memcpy(a.secret.data(), r.position(), a.secret.size());
  r.skip(a.secret.size());
  const auto len = r.get<std::uint32_t>();
  if (len == 0 || len > f.max_native || len != blob.size() - address_header)
    return unexpected(status::invalid_argument, what + " address blob length does not match", f.provider);
  a.native = blob.subspan(address_header);
  return a;
}

}  // namespace fabrix::detail
