// The 32-bit immediate of every notification a communicator sends. A
// remote_write_imm completion names its sender only by queue pair, and two
// users of a domain may each have one to the same process, so the sender's
// rank is in it.
//
//   bits 31..28  the communicator's tag (options::tag, 1..15): a
//                completion_router gives the communicator the immediates
//                with its tag, other code on the domain the rest
//   bits 27..26  kind: data (a chunk landed in a receive slot), credit (the
//                sender has consumed chunks), barrier, abort
//   bits 25..16  sending rank (so at most 1024 ranks)
//   bits 15..0   data: the chunk's sequence number on its channel, mod 2^16;
//                credit: the cumulative count of chunks consumed, mod 2^16;
//                barrier: the round; abort: 0
// Sequence numbers and counts keep running across collective calls, so a
// late credit from the previous call is read correctly by the next one.
// A counter is read relative to what the receiver expects (widen), which
// is exact while fewer than 2^16 chunks are in flight: slots <= 2^15.
#pragma once

#include <cstdint>

namespace fabrix::coll::detail {

enum class notify_kind : std::uint32_t { data = 0, credit = 1, barrier = 2, abort = 3 };

inline constexpr int max_ranks = 1 << 10;
inline constexpr std::uint32_t counter_bits = 16;
inline constexpr std::uint32_t counter_mask = (1u << counter_bits) - 1;
inline constexpr std::uint32_t max_tag = 15;
inline constexpr std::uint32_t imm_tag_mask = 0xfu << 28;
constexpr std::uint32_t imm_tag(std::uint32_t tag) noexcept { return (tag & 0xfu) << 28; }

struct notification {
  std::uint32_t tag = 0;
  notify_kind kind = notify_kind::data;
  int source = 0;
  std::uint32_t counter = 0;  // low counter_bits bits
};

constexpr std::uint32_t encode(std::uint32_t tag, notify_kind k, int source, std::uint64_t counter) noexcept {
  return imm_tag(tag) | (static_cast<std::uint32_t>(k) << 26) |
         ((static_cast<std::uint32_t>(source) & 0x3ffu) << counter_bits) |
         (static_cast<std::uint32_t>(counter) & counter_mask);
}

constexpr notification decode(std::uint32_t imm) noexcept {
  return {imm >> 28, static_cast<notify_kind>((imm >> 26) & 3u), static_cast<int>((imm >> counter_bits) & 0x3ffu),
          imm & counter_mask};
}

// The full counter value that has low bits `low` and lies in [base, base + 2^16).
constexpr std::uint64_t widen(std::uint64_t base, std::uint32_t low) noexcept {
  return base + ((low - static_cast<std::uint32_t>(base)) & counter_mask);
}

}  // namespace fabrix::coll::detail
