// fabrix::completion — one finished operation, as returned by domain::poll.
//
// What a completion means — the same on every provider:
//   write, write_with_imm, send: the source buffer may be reused. At
//     completion_level::local (the default) nothing more is promised: the
//     bytes may still be on their way. At completion_level::delivered the
//     bytes are also visible at the target (its CPU reads them).
//   read, fetch_add, compare_swap: the result is in the local buffer (the
//     target has executed the operation).
//   recv: the message is in the buffer. remote_write_imm: the write's bytes
//     are in place at this process.
//   flush: every operation posted before it on the same queue pair is
//     complete and visible at the target, and every unsignaled one among
//     them is counted in queue_pair::finished().
// An operation that fails completes with its error even when it was posted
// unsignaled (op_options::unsignaled).
//
// A recv that finds a message longer than its buffer completes with
// status::truncated: `bytes` is the buffer's length, the buffer holds the
// message's first `bytes` bytes and the rest is dropped (every provider).
#pragma once

#include <fabrix/status.hpp>

#include <cstdint>
#include <string_view>

namespace fabrix {

// How far a write, write_with_imm or send has gone when it completes (see
// above). Chosen per operation (op_options::delivered) or per queue pair
// (queue_pair::set_default_options); each provider gives it its cheapest way.
enum class completion_level : std::uint8_t {
  local,      // the source may be reused
  delivered,  // and the bytes are visible at the target
};

enum class opcode : std::uint8_t {
  write,
  read,
  write_with_imm,
  fetch_add,
  compare_swap,
  send,
  recv,
  flush,
  // Target side: a peer's write_with_imm has landed; `imm` is its value and
  // `bytes` the size of the write. It carries no token (token == 0).
  remote_write_imm,
};

constexpr std::string_view to_string(opcode op) noexcept {
  switch (op) {
    case opcode::write: return "write";
    case opcode::read: return "read";
    case opcode::write_with_imm: return "write_with_imm";
    case opcode::fetch_add: return "fetch_add";
    case opcode::compare_swap: return "compare_swap";
    case opcode::send: return "send";
    case opcode::recv: return "recv";
    case opcode::flush: return "flush";
    case opcode::remote_write_imm: return "remote_write_imm";
  }
  return "unknown";
}

namespace detail {
// completion::flags bits, internal to fabrix.
inline constexpr std::uint8_t flag_awaited = 1;  // token is a detail::op_awaiter_base*
}  // namespace detail

struct completion {
  std::uint64_t token = 0;  // the caller's token, returned unchanged
  std::uint64_t bytes = 0;  // bytes moved (received, for recv)
  fabrix::status status = status::ok;
  fabrix::opcode op = opcode::write;
  std::uint8_t flags = 0;        // internal routing bits; leave zero
  std::uint32_t imm = 0;         // write_with_imm / remote_write_imm value
  std::int32_t native_code = 0;  // provider's own code when status is an error
  // remote_write_imm and recv: the peer id of the queue pair the message
  // arrived on (queue_pair::peer_id(); connect_all makes it the sender's
  // rank), or unknown_peer when this domain has no queue pair to the sender.
  // 0 for other operations.
  std::uint32_t peer = 0;
  static constexpr std::uint32_t unknown_peer = 0xffffffffu;
};

}  // namespace fabrix
