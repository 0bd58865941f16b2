// fabrix::remote_buffer — everything a peer needs to target a registration:
// which provider made it, where it is, how long, what the peer may do, and the
// provider's key bytes. A trivially copyable value; send it to peers with
// encode() and rebuild it with decode().
//
// Wire format (version 1, all integers little-endian):
//   "FBXR" u16 version  u16 provider  u32 access  u8 kind  u8 0  u16 device
//   u64 address  u64 length  u64 owner  u64 epoch  u64 seal  u16 key_size
//   key bytes  u64 FNV-1a checksum of everything before it
//
// The seal is a keyed hash (SipHash-2-4) of all other fields, made by the
// owning domain with a secret carried in its address blob. That blob goes
// through the bootstrap's allgather, so every rank of the job receives the
// secret, not only the peers the domain connects to (and the bootstrap
// authenticates but does not encrypt: anyone reading the network between
// the ranks sees it too). An endpoint accepts a remote_buffer only if it
// names that endpoint's peer as owner and its seal verifies, so key bytes,
// address, length or rights altered by accident or forged by a process
// outside the job are refused with invalid_argument instead of reaching the
// provider; a rank of the same job can make seals that verify.
// decode() rejects anything else — short, long, foreign, unknown version,
// a provider or memory kind not registered in this process (registry.hpp),
// unknown access bits, a key over max_key_size, an address range
// that wraps, a bad checksum — with status::invalid_argument and a message.
// It never reads outside the span it is given.
#pragma once

#include <fabrix/capabilities.hpp>
#include <fabrix/detail/fnv1a.hpp>
#include <fabrix/detail/little_endian.hpp>
#include <fabrix/detail/siphash.hpp>
#include <fabrix/memory.hpp>
#include <fabrix/registry.hpp>
#include <fabrix/result.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace fabrix {

class remote_buffer;
class remote_key;

// A byte range inside a peer's registration. Refers to its remote_buffer
// (`buffer`) or to the remote_key it was imported as (`key`, remote_key.hpp;
// then `buffer` is null), which must stay alive until the operation using the
// slice has been posted (not until it completes). The range is checked when
// the operation is posted.
struct remote_slice {
  const remote_buffer* buffer = nullptr;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  const remote_key* key = nullptr;
};

class remote_buffer {
 public:
  static constexpr std::size_t max_key_size = 512;
  static constexpr std::uint16_t encoding_version = 1;
  static constexpr std::size_t header_size = 58;
  static constexpr std::size_t checksum_size = 8;

  fabrix::provider_id provider = provider_id::none;
  fabrix::access rights = access::local;
  memory_location location{};
  std::uint64_t address = 0;  // the peer's virtual address of byte 0
  std::uint64_t length = 0;
  std::uint64_t owner = 0;  // random id of the exporting domain
  std::uint64_t epoch = 0;  // registration number within the owner; with owner, names this region
  std::uint64_t seal = 0;   // keyed hash of every other field, by the owner (see above)
  std::uint16_t key_size = 0;
  std::array<std::byte, max_key_size> key{};  // bytes past key_size are zero

  remote_slice slice(std::uint64_t offset, std::uint64_t len) const noexcept { return remote_slice{this, offset, len}; }
  remote_slice whole() const noexcept { return remote_slice{this, 0, length}; }
  std::span<const std::byte> key_bytes() const noexcept { return {key.data(), key_size}; }
  // Names the same region as `o` (owner, epoch, seal, range, rights and key
  // bytes): how a provider finds a remote_buffer among those it verified.
  bool same_region(const remote_buffer& o) const noexcept {
    return owner == o.owner && epoch == o.epoch && seal == o.seal && address == o.address && length == o.length &&
           rights == o.rights && key_size == o.key_size && std::memcmp(key.data(), o.key.data(), key_size) == 0;
  }

  std::size_t encoded_size() const noexcept { return header_size + key_size + checksum_size; }
  std::vector<std::byte> encode() const;
  // Writes encoded_size() bytes; false (nothing written) when `out` is smaller.
  bool encode_to(std::span<std::byte> out) const noexcept;
  static result<remote_buffer> decode(std::span<const std::byte> bytes);

  // The seal of this value's other fields under `secret`.
  std::uint64_t compute_seal(const detail::seal_key& secret) const noexcept;
};

static_assert(std::is_trivially_copyable_v<remote_buffer>);

inline bool remote_buffer::encode_to(std::span<std::byte> out) const noexcept {
  if (key_size > max_key_size || out.size() < encoded_size()) return false;
  detail::le_writer w(out.data());
  w.put_bytes(reinterpret_cast<const std::byte*>("FBXR"), 4);
  w.put<std::uint16_t>(encoding_version);
  w.put<std::uint16_t>(static_cast<std::uint16_t>(provider));
  w.put<std::uint32_t>(static_cast<std::uint32_t>(rights));
  w.put<std::uint8_t>(static_cast<std::uint8_t>(location.kind));
  w.put<std::uint8_t>(0);
  w.put<std::uint16_t>(static_cast<std::uint16_t>(location.device));
  w.put<std::uint64_t>(address);
  w.put<std::uint64_t>(length);
  w.put<std::uint64_t>(owner);
  w.put<std::uint64_t>(epoch);
  w.put<std::uint64_t>(seal);
  w.put<std::uint16_t>(key_size);
  w.put_bytes(key.data(), key_size);
  const std::size_t body = header_size + key_size;
  w.put<std::uint64_t>(detail::fnv1a(out.first(body)));
  return true;
}

inline std::vector<std::byte> remote_buffer::encode() const {
  std::vector<std::byte> out(encoded_size());
  if (!encode_to(out)) out.clear();
  return out;
}

inline result<remote_buffer> remote_buffer::decode(std::span<const std::byte> bytes) {
  auto bad = [](std::string why) { return unexpected(status::invalid_argument, "remote_buffer: " + why); };
  if (bytes.size() < header_size + checksum_size)
    return bad("blob of " + std::to_string(bytes.size()) + " bytes is shorter than the smallest encoding");
  if (std::memcmp(bytes.data(), "FBXR", 4) != 0) return bad("not a fabrix remote_buffer (bad magic)");
  detail::le_reader r(bytes.data() + 4);
  const auto version = r.get<std::uint16_t>();
  if (version != encoding_version)
    return bad("encoding version " + std::to_string(version) + " is not supported (expected " +
               std::to_string(encoding_version) + ")");
  remote_buffer rb;
  rb.provider = static_cast<provider_id>(r.get<std::uint16_t>());
  rb.rights = static_cast<access>(r.get<std::uint32_t>());
  const auto kind = r.get<std::uint8_t>();
  const auto reserved = r.get<std::uint8_t>();
  rb.location.device = r.get<std::uint16_t>();
  rb.address = r.get<std::uint64_t>();
  rb.length = r.get<std::uint64_t>();
  rb.owner = r.get<std::uint64_t>();
  rb.epoch = r.get<std::uint64_t>();
  rb.seal = r.get<std::uint64_t>();
  rb.key_size = r.get<std::uint16_t>();
  if (rb.key_size > max_key_size)
    return bad("key of " + std::to_string(rb.key_size) + " bytes exceeds " + std::to_string(max_key_size));
  if (bytes.size() != header_size + rb.key_size + checksum_size)
    return bad("blob of " + std::to_string(bytes.size()) + " bytes does not match its key size (" +
               std::to_string(header_size + rb.key_size + checksum_size) + " expected)");
  const std::size_t body = header_size + rb.key_size;
  detail::le_reader tail(bytes.data() + body);
  if (tail.get<std::uint64_t>() != detail::fnv1a(bytes.first(body))) return bad("checksum mismatch (corrupted blob)");
  if (!is_registered(rb.provider))
    return bad("unknown provider id " + std::to_string(static_cast<unsigned>(rb.provider)) +
               ": no provider of that number is registered in this process");
  if (!is_known(rb.rights)) return bad("unknown access bits");
  rb.location.kind = static_cast<memory_kind>(kind);
  if (!is_registered(rb.location.kind) || reserved != 0)
    return bad("unknown memory kind " + std::to_string(static_cast<unsigned>(kind)));
  if (rb.length == 0) return bad("empty region");
  if (rb.address + rb.length < rb.address) return bad("address range wraps around");
  std::memcpy(rb.key.data(), r.position(), rb.key_size);
  return rb;
}

inline std::uint64_t remote_buffer::compute_seal(const detail::seal_key& secret) const noexcept {
  std::array<std::byte, header_size + max_key_size + checksum_size> buf;
  remote_buffer unsealed = *this;
  unsealed.seal = 0;
  if (!unsealed.encode_to(buf)) return 0;
  return detail::siphash24(secret, std::span<const std::byte>(buf.data(), header_size + key_size));
}

}  // namespace fabrix
