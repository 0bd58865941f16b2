// FNV-1a, 64-bit: a fast unkeyed hash for checksums and for deriving stable
// numbers from names. Not for anything an adversary chooses (see siphash.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace fabrix::detail {

inline constexpr std::uint64_t fnv1a_basis = 0xcbf29ce484222325ull;

constexpr std::uint64_t fnv1a_step(std::uint64_t h, std::uint8_t octet) noexcept {
  return (h ^ octet) * 0x100000001b3ull;
}

inline std::uint64_t fnv1a(std::span<const std::byte> bytes) noexcept {
  std::uint64_t h = fnv1a_basis;
  for (std::byte b : bytes) h = fnv1a_step(h, static_cast<std::uint8_t>(b));
  return h;
}

// constexpr, so that numbers derived from names can be compile-time constants.
constexpr std::uint64_t fnv1a(std::string_view text) noexcept {
  std::uint64_t h = fnv1a_basis;
  for (char c : text) h = fnv1a_step(h, static_cast<std::uint8_t>(c));
  return h;
}

}  // namespace fabrix::detail
