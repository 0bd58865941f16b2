// The address blob of a routed domain: who it is, which node it runs on,
// and the address blob of each provider domain it holds.
//   "FXRT" u16 version (2)  u64 nonce  u64 node  u8[16] secret  u8 count
//   count x { u8 classes (bit per route_class)  u8 rail  u16 provider id
//             u8 length + transport  u32 length + the provider's blob }
// A rail is the provider domain's position in its route's device list (0
// where the route has one); a peer's rail i connects to ours.
// The secret seals the routed domain's remote_buffers, as every provider's
// does (remote_buffer.hpp); each provider's own blob carries its own.
#pragma once

#include <fabrix/capabilities.hpp>
#include <fabrix/detail/little_endian.hpp>
#include <fabrix/detail/siphash.hpp>
#include <fabrix/result.hpp>
#include <fabrix/routed/config.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fabrix::detail {

// Rails on the node and net routes, one gpu domain, one staged domain.
inline constexpr std::size_t routed_max_subs = 2 * routed_max_rails + 2;
inline constexpr std::uint16_t routed_address_version = 2;

struct routed_sub_address {
  std::uint8_t classes = 0;  // bit (1 << route_class)
  std::uint8_t rail = 0;
  provider_id provider = provider_id::none;
  std::string transport;
  std::span<const std::byte> blob;  // points into the parsed blob
};

struct routed_address {
  std::uint64_t nonce = 0;
  std::uint64_t node = 0;
  seal_key secret{};
  std::vector<routed_sub_address> subs;
};

inline std::vector<std::byte> encode_routed_address(const routed_address& a) {
  std::size_t size = 4 + 2 + 8 + 8 + 16 + 1;
  for (const auto& s : a.subs) size += 1 + 1 + 2 + 1 + s.transport.size() + 4 + s.blob.size();
  std::vector<std::byte> out(size);
  le_writer w(out.data());
  w.put_bytes(reinterpret_cast<const std::byte*>("FXRT"), 4);
  w.put<std::uint16_t>(routed_address_version);
  w.put<std::uint64_t>(a.nonce);
  w.put<std::uint64_t>(a.node);
  w.put_bytes(reinterpret_cast<const std::byte*>(a.secret.data()), a.secret.size());
  w.put<std::uint8_t>(static_cast<std::uint8_t>(a.subs.size()));
  for (const auto& s : a.subs) {
    w.put<std::uint8_t>(s.classes);
    w.put<std::uint8_t>(s.rail);
    w.put<std::uint16_t>(static_cast<std::uint16_t>(s.provider));
    w.put<std::uint8_t>(static_cast<std::uint8_t>(s.transport.size()));
    w.put_bytes(reinterpret_cast<const std::byte*>(s.transport.data()), s.transport.size());
    w.put<std::uint32_t>(static_cast<std::uint32_t>(s.blob.size()));
    w.put_bytes(s.blob.data(), s.blob.size());
  }
  return out;
}

// invalid_argument for anything but a whole blob of this format with 1 to
// routed_max_subs provider entries. Never reads outside `blob`.
inline result<routed_address> decode_routed_address(std::span<const std::byte> blob) {
  auto bad = [](const std::string& why) {
    return unexpected(status::invalid_argument, "connect: not a routed address blob: " + why, "routed");
  };
  std::size_t at = 0;
  auto take = [&](std::size_t n) -> const std::byte* {
    if (blob.size() - at < n) return nullptr;
    const std::byte* p = blob.data() + at;
    at += n;
    return p;
  };
  const std::byte* head = take(4 + 2 + 8 + 8 + 16 + 1);
  if (head == nullptr) return bad(std::to_string(blob.size()) + " bytes is too short");
  if (std::memcmp(head, "FXRT", 4) != 0) return bad("bad magic");
  if (load_le<std::uint16_t>(head + 4) != routed_address_version) return bad("unknown version");
  routed_address a;
  a.nonce = load_le<std::uint64_t>(head + 6);
  a.node = load_le<std::uint64_t>(head + 14);
  std::memcpy(a.secret.data(), head + 22, a.secret.size());
  const auto count = static_cast<std::uint8_t>(head[38]);
  if (count == 0 || count > routed_max_subs) return bad(std::to_string(count) + " provider entries");
  for (unsigned i = 0; i < count; ++i) {
    const std::byte* fixed = take(5);
    if (fixed == nullptr) return bad("truncated entry");
    routed_sub_address s;
    s.classes = static_cast<std::uint8_t>(fixed[0]);
    s.rail = static_cast<std::uint8_t>(fixed[1]);
    if (s.rail >= routed_max_rails) return bad("rail " + std::to_string(s.rail));
    s.provider = static_cast<provider_id>(load_le<std::uint16_t>(fixed + 2));
    const auto tlen = static_cast<std::uint8_t>(fixed[4]);
    const std::byte* t = take(tlen);
    const std::byte* blen_at = t ? take(4) : nullptr;
    if (blen_at == nullptr) return bad("truncated entry");
    s.transport.assign(reinterpret_cast<const char*>(t), tlen);
    const auto blen = load_le<std::uint32_t>(blen_at);
    const std::byte* b = take(blen);
    if (b == nullptr || blen == 0) return bad("truncated or empty provider address");
    s.blob = std::span<const std::byte>(b, blen);
    a.subs.push_back(std::move(s));
  }
  if (at != blob.size()) return bad("trailing bytes");
  return a;
}

}  // namespace fabrix::detail
