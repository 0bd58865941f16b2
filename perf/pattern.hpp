// The bytes fabrix-perf moves: a pattern that depends on the offset and on
// the measurement (so stale data from an earlier size is caught), a poison
// that differs from it at every byte, and the check that finds the first
// wrong byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace fabrix::perf {

inline std::uint8_t pattern_byte(std::uint64_t seed, std::uint64_t i) noexcept {
  return static_cast<std::uint8_t>((i * 131u) ^ (i >> 8) ^ (seed * 0x9du));
}

inline void fill_pattern(std::byte* p, std::uint64_t len, std::uint64_t seed) noexcept {
  for (std::uint64_t i = 0; i < len; ++i) p[i] = std::byte{pattern_byte(seed, i)};
}

inline void fill_poison(std::byte* p, std::uint64_t len, std::uint64_t seed) noexcept {
  for (std::uint64_t i = 0; i < len; ++i) p[i] = std::byte{static_cast<std::uint8_t>(~pattern_byte(seed, i))};
}

struct mismatch {
  std::uint64_t offset;
  std::uint8_t got;
  std::uint8_t want;
};

// The first byte in [0, len) that is not the pattern, if any.
inline std::optional<mismatch> check_pattern(const std::byte* p, std::uint64_t len, std::uint64_t seed) noexcept {
  for (std::uint64_t i = 0; i < len; ++i) {
    const auto want = pattern_byte(seed, i);
    const auto got = static_cast<std::uint8_t>(p[i]);
    if (got != want) return mismatch{i, got, want};
  }
  return std::nullopt;
}

// Ping-pong markers in the last byte of a latency message: 1..250 cycle per
// iteration, 0xFF asks the echoing side to stop.
inline std::uint8_t marker(std::uint64_t iteration) noexcept { return static_cast<std::uint8_t>(iteration % 250 + 1); }
inline constexpr std::uint8_t stop_marker = 0xFF;
inline constexpr std::uint32_t stop_imm = 0xFFFFFFFFu;

}  // namespace fabrix::perf
