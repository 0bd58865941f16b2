// The caller tokens of a communicator's own operations: what completed
// (kind), towards which peer, and for data writes which send slot. Tokens
// of peers the communicator does not know are ignored.
#pragma once

#include <cstdint>

namespace fabrix::coll::detail {

// data: a chunk from a send slot (peer: its target, slot: the send slot);
// forward: a chunk from a receive slot (peer: where it came from, slot: that
// receive slot); direct: a chunk from a registered user buffer (peer: its
// target; no slot).
enum class token_kind : std::uint64_t { data = 1, credit, barrier, abort, probe, forward, direct };

constexpr std::uint64_t make_token(token_kind k, int peer, std::uint32_t slot) noexcept {
  return (static_cast<std::uint64_t>(k) << 56) | (static_cast<std::uint64_t>(peer) << 32) | slot;
}
constexpr token_kind token_kind_of(std::uint64_t t) noexcept { return static_cast<token_kind>(t >> 56); }
constexpr int token_peer(std::uint64_t t) noexcept { return static_cast<int>((t >> 32) & 0xffffff); }
constexpr std::uint32_t token_slot(std::uint64_t t) noexcept { return static_cast<std::uint32_t>(t & 0xffffffffu); }

}  // namespace fabrix::coll::detail
