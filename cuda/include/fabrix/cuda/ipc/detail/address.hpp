// The cuda_ipc domain's address blob — what connect() takes from a peer:
//   "FXCA" u16 version  u64 nonce  u64 node  u32 pid  u64 process  u16 device
//   u8[16] secret  u8 socket_len  socket name  u8 host_len  host name
// `node` hashes the kernel's boot id and the host name: peers whose node
// differs are on another machine and are refused (CUDA IPC is node-local).
// `socket` is the abstract Unix socket name the domain listens on (without
// the leading NUL). The secret seals the domain's remote_buffers; it travels
// only in this blob. Needs no CUDA headers.
#pragma once

#include <fabrix/detail/env.hpp>
#include <fabrix/detail/fnv1a.hpp>
#include <fabrix/detail/little_endian.hpp>
#include <fabrix/detail/process_identity.hpp>
#include <fabrix/detail/siphash.hpp>
#include <fabrix/result.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace fabrix::cuda::ipc {

struct peer_address {
  std::uint64_t nonce = 0;
  std::uint64_t node = 0;
  std::uint32_t pid = 0;
  std::uint64_t process = 0;  // random per process: equal only for domains of one process
  std::uint16_t device = 0;
  fabrix::detail::seal_key secret{};
  std::string socket;  // abstract socket name, without the leading NUL
  std::string host;
};

inline constexpr std::size_t address_fixed = 4 + 2 + 8 + 8 + 4 + 8 + 2 + 16 + 1 + 1;
inline constexpr std::uint16_t address_version = 1;
inline constexpr std::size_t max_name = 255;

// This process's token (pids repeat across pid namespaces; this does not).
inline std::uint64_t process_token() {
  static const std::uint64_t token = [] {
    std::random_device rd;
    std::uint64_t t = 0;
    while (t == 0) t = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
    return t;
  }();
  return token;
}

inline std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

// This machine as cuda_ipc sees it: its boot id, then FABRIX_NODE_ID when
// set, else the host name and the network namespace (the control sockets
// are abstract unix sockets, one set per network namespace), hashed. Unlike
// process_identity.hpp's node it leaves out the pid namespace: CUDA IPC
// works between pid namespaces and peers are told apart by process_token().
inline std::uint64_t node_id() {
  std::string where;
  if (std::FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    char buf[64] = {};
    where.append(buf, std::fread(buf, 1, sizeof(buf) - 1, f));
    std::fclose(f);
  }
  where += '/';
  if (const char* id = fabrix::detail::env_text("FABRIX_NODE_ID")) {
    where += id;
  } else {
    where += host_name();
    where += '/';
    where += fabrix::detail::namespace_of("/proc/self/ns/net");
  }
  return fabrix::detail::fnv1a(where);
}

// Empty when a name does not fit (the caller made it; names are short).
inline std::vector<std::byte> encode_address(const peer_address& a) {
  if (a.socket.size() > max_name || a.host.size() > max_name) return {};
  std::vector<std::byte> blob(address_fixed + a.socket.size() + a.host.size());
  fabrix::detail::le_writer w(blob.data());
  w.put_bytes(reinterpret_cast<const std::byte*>("FXCA"), 4);
  w.put<std::uint16_t>(address_version);
  w.put<std::uint64_t>(a.nonce);
  w.put<std::uint64_t>(a.node);
  w.put<std::uint32_t>(a.pid);
  w.put<std::uint64_t>(a.process);
  w.put<std::uint16_t>(a.device);
  w.put_bytes(reinterpret_cast<const std::byte*>(a.secret.data()), a.secret.size());
  w.put<std::uint8_t>(static_cast<std::uint8_t>(a.socket.size()));
  w.put_bytes(reinterpret_cast<const std::byte*>(a.socket.data()), a.socket.size());
  w.put<std::uint8_t>(static_cast<std::uint8_t>(a.host.size()));
  w.put_bytes(reinterpret_cast<const std::byte*>(a.host.data()), a.host.size());
  return blob;
}

// Refuses (invalid_argument) anything but one complete blob of this version.
// Never reads outside `blob`.
inline result<peer_address> parse_address(std::span<const std::byte> blob) {
  auto bad = [](const char* why) { return unexpected(status::invalid_argument, why, "cuda_ipc"); };
  if (blob.size() < address_fixed || std::memcmp(blob.data(), "FXCA", 4) != 0)
    return bad("not a fabrix cuda_ipc address blob");
  fabrix::detail::le_reader r(blob.data() + 4);
  if (r.get<std::uint16_t>() != address_version) return bad("cuda_ipc address blob of another version");
  peer_address a;
  a.nonce = r.get<std::uint64_t>();
  a.node = r.get<std::uint64_t>();
  a.pid = r.get<std::uint32_t>();
  a.process = r.get<std::uint64_t>();
  a.device = r.get<std::uint16_t>();
  std::memcpy(a.secret.data(), r.position(), a.secret.size());
  r.skip(a.secret.size());
  std::size_t at = address_fixed - 2;  // the socket name's length byte
  const std::size_t socket_len = std::to_integer<std::size_t>(blob[at]);
  if (socket_len == 0 || blob.size() < address_fixed + socket_len) return bad("cuda_ipc address blob is truncated");
  a.socket.assign(reinterpret_cast<const char*>(blob.data() + at + 1), socket_len);
  at += 1 + socket_len;
  const std::size_t host_len = std::to_integer<std::size_t>(blob[at]);
  if (blob.size() != address_fixed + socket_len + host_len) return bad("cuda_ipc address blob length does not match");
  a.host.assign(reinterpret_cast<const char*>(blob.data() + at + 1), host_len);
  return a;
}

}  // namespace fabrix::cuda::ipc
