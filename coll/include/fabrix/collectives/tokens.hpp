// The caller tokens of a communicator's own operations: its tag, what
// completed (kind), towards which peer, and for data writes which send slot.
//
//   bits 63..56  0xf0 | options::tag: a completion_router gives the
//                communicator every token with this top byte (filter_of)
//   bits 55..48  kind
//   bits 47..32  peer (ranks < 1024)
//   bits 31..0   slot
// Tokens with another top byte, or of peers the communicator does not know,
// are not its own and are ignored.
#pragma once

#include <fabrix/collectives/notify.hpp>
#include <fabrix/completion_router.hpp>

#include <cstdint>

namespace fabrix::coll::detail {

// data: a chunk from a send slot (peer: its target, slot: the send slot);
// forward: a chunk from a receive slot (peer: where it came from, slot: that
// receive slot); direct: a chunk from a registered user buffer (peer: its
// target; no slot).
enum class token_kind : std::uint64_t { data = 1, credit, barrier, abort, probe, forward, direct };

inline constexpr std::uint64_t token_tag_mask = std::uint64_t{0xff} << 56;
constexpr std::uint64_t token_tag(std::uint32_t tag) noexcept { return (std::uint64_t{0xf0} | (tag & 0xfu)) << 56; }

constexpr std::uint64_t make_token(std::uint32_t tag, token_kind k, int peer, std::uint32_t slot) noexcept {
  return token_tag(tag) | (static_cast<std::uint64_t>(k) << 48) | ((static_cast<std::uint64_t>(peer) & 0xffff) << 32) |
         slot;
}
constexpr bool token_has_tag(std::uint64_t t, std::uint32_t tag) noexcept {
  return (t & token_tag_mask) == token_tag(tag);
}
constexpr token_kind token_kind_of(std::uint64_t t) noexcept { return static_cast<token_kind>((t >> 48) & 0xff); }
constexpr int token_peer(std::uint64_t t) noexcept { return static_cast<int>((t >> 32) & 0xffff); }
constexpr std::uint32_t token_slot(std::uint64_t t) noexcept { return static_cast<std::uint32_t>(t & 0xffffffffu); }

// Everything a communicator with `tag` posts or is sent: its tokens and its
// notifications' immediates (notify.hpp).
constexpr completion_filter filter_of(std::uint32_t tag) noexcept {
  return completion_filter{token_tag_mask, token_tag(tag), imm_tag_mask, imm_tag(tag)};
}

}  // namespace fabrix::coll::detail
