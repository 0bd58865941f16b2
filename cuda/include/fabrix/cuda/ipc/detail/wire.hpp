// Packets between cuda_ipc domains, one per SOCK_SEQPACKET message on the
// Unix socket of a connection (socket.hpp). Needs no CUDA headers.
//
//   "FXCW" u8 type  u8[3] 0  u64 a  u64 b  payload
//   hello       a = sender's nonce, b = proof   first packet on a connection
//               proof = hello_proof(receiver's secret, sender's nonce): the
//               sender holds the receiver's address blob (from the bootstrap);
//               packets on a connection without a valid hello are dropped
//   notify      a = imm, b = bytes              a write_with_imm's data is in place
//   message     payload = the bytes of a send   (up to max_message)
//   fd_request  a = export id, b = region seal  "send me this VMM allocation's fd"
//               (the seal proves the asker was given that region)
//   fd_reply    a = export id, b = 0 or errno   the fd rides along as SCM_RIGHTS
//   release     a = region epoch                the sender deregistered that region
//   bell        the receiver's doorbell fd rides along as SCM_RIGHTS
//               (doorbell.hpp); sent once, in answer to a valid hello
//   rings       the sender has mapped the doorbell and rings it after every
//               packet it sends on this connection from now on
#pragma once

#include <fabrix/detail/little_endian.hpp>
#include <fabrix/detail/siphash.hpp>
#include <fabrix/result.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace fabrix::cuda::ipc {

enum class packet_type : std::uint8_t { hello = 1, notify, message, fd_request, fd_reply, release, bell, rings };

inline constexpr std::size_t packet_header = 24;
inline constexpr std::size_t max_message = 64 * 1024;  // largest send()
inline constexpr std::size_t max_packet = packet_header + max_message;

struct packet {
  packet_type type = packet_type::hello;
  std::uint64_t a = 0;
  std::uint64_t b = 0;
  std::span<const std::byte> payload;  // points into the parsed bytes
};

inline std::uint64_t hello_proof(const fabrix::detail::seal_key& receiver_secret, std::uint64_t sender_nonce) noexcept {
  std::byte in[12] = {std::byte{'h'}, std::byte{'e'}, std::byte{'l'}, std::byte{'o'}};
  fabrix::detail::le_writer(in + 4).put<std::uint64_t>(sender_nonce);
  return fabrix::detail::siphash24(receiver_secret, in);
}

inline void encode_header(std::span<std::byte, packet_header> out, packet_type t, std::uint64_t a,
                          std::uint64_t b) noexcept {
  fabrix::detail::le_writer w(out.data());
  w.put_bytes(reinterpret_cast<const std::byte*>("FXCW"), 4);
  w.put<std::uint8_t>(static_cast<std::uint8_t>(t));
  w.put<std::uint8_t>(0);
  w.put<std::uint16_t>(0);
  w.put<std::uint64_t>(a);
  w.put<std::uint64_t>(b);
}

// Refuses (invalid_argument) a short or foreign packet, an unknown type, a
// payload on a type that has none, or a message over max_message. Never reads
// outside `bytes`.
inline result<packet> parse_packet(std::span<const std::byte> bytes) {
  auto bad = [](const char* why) { return unexpected(status::invalid_argument, why, "cuda_ipc"); };
  if (bytes.size() < packet_header || std::memcmp(bytes.data(), "FXCW", 4) != 0) return bad("not a cuda_ipc packet");
  fabrix::detail::le_reader r(bytes.data() + 4);
  const auto type = r.get<std::uint8_t>();
  const auto pad1 = r.get<std::uint8_t>();
  const auto pad2 = r.get<std::uint16_t>();
  packet p;
  p.a = r.get<std::uint64_t>();
  p.b = r.get<std::uint64_t>();
  p.payload = bytes.subspan(packet_header);
  if (pad1 != 0 || pad2 != 0) return bad("cuda_ipc packet with nonzero padding");
  if (type < static_cast<std::uint8_t>(packet_type::hello) || type > static_cast<std::uint8_t>(packet_type::rings))
    return bad("unknown cuda_ipc packet type");
  p.type = static_cast<packet_type>(type);
  if (p.type == packet_type::message) {
    if (p.payload.size() > max_message) return bad("cuda_ipc message over max_message");
  } else if (!p.payload.empty()) {
    return bad("cuda_ipc control packet with a payload");
  }
  if (p.type == packet_type::notify && p.a > 0xffffffffu) return bad("cuda_ipc notification imm over 32 bits");
  return p;
}

}  // namespace fabrix::cuda::ipc
