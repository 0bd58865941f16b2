// The 32-bit immediate of every notification a communicator sends. A
// remote_write_imm completion carries no sender, so the sender's rank is in it.
//
//   bits 31..30  kind: data (a chunk landed in a receive slot), credit (the
//                sender has consumed chunks), barrier, abort
//   bits 29..20  sending rank (so at most 1024 ranks)
//   bits 19..0   data: the chunk's sequence number on its channel, mod 2^20;
//                credit: the cumulative count of chunks consumed, mod 2^20;
//                barrier: the round; abort: 0
// Sequence numbers and counts keep running across collective calls, so a
// late credit from the previous call is read correctly by the next one.
#pragma once

#include <cstdint>

namespace fabrix::coll::detail {

enum class notify_kind : std::uint32_t { data = 0, credit = 1, barrier = 2, abort = 3 };

inline constexpr int max_ranks = 1 << 10;
inline constexpr std::uint32_t counter_bits = 20;
inline constexpr std::uint32_t counter_mask = (1u << counter_bits) - 1;

struct notification {
  notify_kind kind = notify_kind::data;
  int source = 0;
  std::uint32_t counter = 0;  // low counter_bits bits
};

constexpr std::uint32_t encode(notify_kind k, int source, std::uint64_t counter) noexcept {
  return (static_cast<std::uint32_t>(k) << 30) | ((static_cast<std::uint32_t>(source) & 0x3ffu) << counter_bits) |
         (static_cast<std::uint32_t>(counter) & counter_mask);
}

constexpr notification decode(std::uint32_t imm) noexcept {
  return {static_cast<notify_kind>(imm >> 30), static_cast<int>((imm >> counter_bits) & 0x3ffu), imm & counter_mask};
}

// The full counter value that has low bits `low` and lies in [base, base + 2^20).
constexpr std::uint64_t widen(std::uint64_t base, std::uint32_t low) noexcept {
  return base + ((low - static_cast<std::uint32_t>(base)) & counter_mask);
}

}  // namespace fabrix::coll::detail
