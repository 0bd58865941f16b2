// The bytes verbs domains exchange. Device-free; every decoder is fuzzed.
//
// Address blob — what domain::address() gives and connect() takes (v2, 96 bytes,
// integers little-endian):
//   "FBXV" u16 version  u8 link_layer  u8 mtu  u64 nonce  u8[16] secret
//   u8[16] gid  u16 lid  u16 0  u32 ud_qpn  u32 qkey  u64 flush_addr
//   u32 flush_rkey  u8 connect  u8 cm_family  u16 cm_port  u8[16] cm_ip  u32 0
// It names the domain (nonce), gives the secret that seals its
// remote_buffers, its port address (GID/LID, MTU) and its UD queue pair,
// through which the two sides of each connect() trade RC queue pair numbers.
// flush_addr/flush_rkey: an 8-byte word of the domain that peers may read;
// flush is an RDMA read of it (see post.hpp).
// connect: how the domain connects (options.hpp: 0 bootstrap, 1 rdma_cm).
// With rdma_cm, cm_family (4 or 6), cm_ip (IPv4 in the first 4 bytes, the
// rest zero) and cm_port (host order) say where its rdma_cm listener is;
// with the bootstrap they are all zero. v1 (76 bytes) had none of them.
//
// Hello — one UD datagram of the connection handshake (v1, 40 bytes):
//   "FBXH" u16 version  u8 flags  u8 0  u64 from  u64 to  u32 seq
//   u32 rc_qpn  u32 psn  u32 0
// `from`/`to` are domain nonces; `seq` counts connect() calls between the
// same two domains, so the k-th connect on one side pairs with the k-th on
// the other. flags bit 0: the sender has the receiver's hello already;
// bit 1: this hello answers one (answers are never answered).
//
// Connect request — the private data of an rdma_cm connect request (v1, 28
// bytes; the transport may pad it with zeros):
//   "FBXC" u16 version  u16 0  u64 from  u64 to  u32 seq
// with the same meaning as in a hello: the passive side pairs the request
// with its own k-th connect() to `from`.
#pragma once

#include <fabrix/detail/little_endian.hpp>
#include <fabrix/detail/siphash.hpp>
#include <fabrix/result.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace fabrix::verbs::detail {

inline constexpr std::uint16_t address_version = 2;
inline constexpr std::size_t address_size = 96;
inline constexpr std::uint16_t cm_request_version = 1;
inline constexpr std::size_t cm_request_size = 28;
inline constexpr std::uint16_t hello_version = 1;
inline constexpr std::size_t hello_size = 40;
inline constexpr std::uint32_t max_qpn = 0xffffff;  // QPNs and PSNs are 24-bit

struct peer_address {
  std::uint8_t link_layer = 0;  // IBV_LINK_LAYER_INFINIBAND (1) or _ETHERNET (2)
  std::uint8_t mtu = 0;         // enum ibv_mtu, 1 (256) .. 5 (4096)
  std::uint64_t nonce = 0;
  fabrix::detail::seal_key secret{};
  std::array<std::uint8_t, 16> gid{};
  std::uint16_t lid = 0;
  std::uint32_t ud_qpn = 0;
  std::uint32_t qkey = 0;
  std::uint64_t flush_addr = 0;
  std::uint32_t flush_rkey = 0;
  std::uint8_t connect = 0;    // 0: bootstrap (UD hellos), 1: rdma_cm
  std::uint8_t cm_family = 0;  // 4 or 6 with rdma_cm, else 0
  std::uint16_t cm_port = 0;
  std::array<std::uint8_t, 16> cm_ip{};
};

struct cm_request {
  std::uint64_t from = 0;
  std::uint64_t to = 0;
  std::uint32_t seq = 0;
};

struct hello {
  bool has_yours = false;
  bool is_reply = false;
  std::uint64_t from = 0;
  std::uint64_t to = 0;
  std::uint32_t seq = 0;
  std::uint32_t rc_qpn = 0;
  std::uint32_t psn = 0;
};

inline std::vector<std::byte> encode_address(const peer_address& a) {
  std::vector<std::byte> blob(address_size);
  fabrix::detail::le_writer w(blob.data());
  w.put_bytes(reinterpret_cast<const std::byte*>("FBXV"), 4);
  w.put<std::uint16_t>(address_version);
  w.put<std::uint8_t>(a.link_layer);
  w.put<std::uint8_t>(a.mtu);
  w.put<std::uint64_t>(a.nonce);
  w.put_bytes(reinterpret_cast<const std::byte*>(a.secret.data()), 16);
  w.put_bytes(reinterpret_cast<const std::byte*>(a.gid.data()), 16);
  w.put<std::uint16_t>(a.lid);
  w.put<std::uint16_t>(0);
  w.put<std::uint32_t>(a.ud_qpn);
  w.put<std::uint32_t>(a.qkey);
  w.put<std::uint64_t>(a.flush_addr);
  w.put<std::uint32_t>(a.flush_rkey);
  w.put<std::uint8_t>(a.connect);
  w.put<std::uint8_t>(a.cm_family);
  w.put<std::uint16_t>(a.cm_port);
  w.put_bytes(reinterpret_cast<const std::byte*>(a.cm_ip.data()), 16);
  w.put<std::uint32_t>(0);
  return blob;
}

// Refuses anything but a complete, well-formed blob of this version
// (invalid_argument). Never reads outside `blob`.
inline result<peer_address> parse_address(std::span<const std::byte> blob) {
  auto bad = [](const char* why) {
    return unexpected(status::invalid_argument, std::string("address blob: ") + why, "verbs");
  };
  if (blob.size() != address_size) return bad("wrong size (not a verbs address, or truncated)");
  if (std::memcmp(blob.data(), "FBXV", 4) != 0) return bad("not a fabrix verbs address (bad magic)");
  fabrix::detail::le_reader r(blob.data() + 4);
  if (r.get<std::uint16_t>() != address_version) return bad("unsupported version");
  peer_address a;
  a.link_layer = r.get<std::uint8_t>();
  a.mtu = r.get<std::uint8_t>();
  a.nonce = r.get<std::uint64_t>();
  std::memcpy(a.secret.data(), r.position(), 16);
  r.skip(16);
  std::memcpy(a.gid.data(), r.position(), 16);
  r.skip(16);
  a.lid = r.get<std::uint16_t>();
  const auto pad1 = r.get<std::uint16_t>();
  a.ud_qpn = r.get<std::uint32_t>();
  a.qkey = r.get<std::uint32_t>();
  a.flush_addr = r.get<std::uint64_t>();
  a.flush_rkey = r.get<std::uint32_t>();
  a.connect = r.get<std::uint8_t>();
  a.cm_family = r.get<std::uint8_t>();
  a.cm_port = r.get<std::uint16_t>();
  std::memcpy(a.cm_ip.data(), r.position(), 16);
  r.skip(16);
  const auto pad2 = r.get<std::uint32_t>();
  if (a.link_layer != 1 && a.link_layer != 2) return bad("unknown link layer");
  if (a.mtu < 1 || a.mtu > 5) return bad("unknown MTU");
  if (a.ud_qpn == 0 || a.ud_qpn > max_qpn) return bad("UD queue pair number out of range");
  if (pad1 != 0 || pad2 != 0) return bad("reserved bytes are not zero");
  const bool ip_zero_from4 = std::all_of(a.cm_ip.begin() + 4, a.cm_ip.end(), [](std::uint8_t b) { return b == 0; });
  const bool ip_zero =
      ip_zero_from4 && std::all_of(a.cm_ip.begin(), a.cm_ip.begin() + 4, [](std::uint8_t b) { return b == 0; });
  if (a.connect == 0) {
    if (a.cm_family != 0 || a.cm_port != 0 || !ip_zero) return bad("rdma_cm fields set on a bootstrap address");
  } else if (a.connect == 1) {
    if (a.cm_family != 4 && a.cm_family != 6) return bad("unknown rdma_cm address family");
    if (a.cm_port == 0) return bad("rdma_cm port is zero");
    if (a.cm_family == 4 && !ip_zero_from4) return bad("IPv4 rdma_cm address with stray bytes");
  } else {
    return bad("unknown connection method");
  }
  return a;
}

inline void encode_hello(const hello& h, std::byte* out) noexcept {
  fabrix::detail::le_writer w(out);
  w.put_bytes(reinterpret_cast<const std::byte*>("FBXH"), 4);
  w.put<std::uint16_t>(hello_version);
  w.put<std::uint8_t>(static_cast<std::uint8_t>((h.has_yours ? 1 : 0) | (h.is_reply ? 2 : 0)));
  w.put<std::uint8_t>(0);
  w.put<std::uint64_t>(h.from);
  w.put<std::uint64_t>(h.to);
  w.put<std::uint32_t>(h.seq);
  w.put<std::uint32_t>(h.rc_qpn);
  w.put<std::uint32_t>(h.psn);
  w.put<std::uint32_t>(0);
}

// Nothing for anything but a well-formed hello. Never reads outside `in`.
inline std::optional<hello> parse_hello(std::span<const std::byte> in) noexcept {
  if (in.size() != hello_size || std::memcmp(in.data(), "FBXH", 4) != 0) return std::nullopt;
  fabrix::detail::le_reader r(in.data() + 4);
  if (r.get<std::uint16_t>() != hello_version) return std::nullopt;
  const auto flags = r.get<std::uint8_t>();
  const auto pad = r.get<std::uint8_t>();
  hello h;
  h.has_yours = flags & 1;
  h.is_reply = flags & 2;
  h.from = r.get<std::uint64_t>();
  h.to = r.get<std::uint64_t>();
  h.seq = r.get<std::uint32_t>();
  h.rc_qpn = r.get<std::uint32_t>();
  h.psn = r.get<std::uint32_t>();
  const auto pad2 = r.get<std::uint32_t>();
  if ((flags & ~3u) != 0 || pad != 0 || pad2 != 0) return std::nullopt;
  if (h.rc_qpn == 0 || h.rc_qpn > max_qpn || h.psn > max_qpn) return std::nullopt;
  return h;
}

inline void encode_cm_request(const cm_request& q, std::byte* out) noexcept {
  fabrix::detail::le_writer w(out);
  w.put_bytes(reinterpret_cast<const std::byte*>("FBXC"), 4);
  w.put<std::uint16_t>(cm_request_version);
  w.put<std::uint16_t>(0);
  w.put<std::uint64_t>(q.from);
  w.put<std::uint64_t>(q.to);
  w.put<std::uint32_t>(q.seq);
}

// Nothing unless `in` starts with a well-formed request (bytes after the
// first cm_request_size are the transport's padding and are ignored).
// Never reads outside `in`.
inline std::optional<cm_request> parse_cm_request(std::span<const std::byte> in) noexcept {
  if (in.size() < cm_request_size || std::memcmp(in.data(), "FBXC", 4) != 0) return std::nullopt;
  fabrix::detail::le_reader r(in.data() + 4);
  if (r.get<std::uint16_t>() != cm_request_version) return std::nullopt;
  if (r.get<std::uint16_t>() != 0) return std::nullopt;
  cm_request q;
  q.from = r.get<std::uint64_t>();
  q.to = r.get<std::uint64_t>();
  q.seq = r.get<std::uint32_t>();
  return q;
}

}  // namespace fabrix::verbs::detail
