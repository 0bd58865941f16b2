// SipHash-2-4 (Aumasson & Bernstein): a keyed 64-bit hash, used to seal
// remote_buffers so that an endpoint accepts only key bytes its peer made.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace fabrix::detail {

using seal_key = std::array<std::uint8_t, 16>;

inline std::uint64_t siphash24(const seal_key& key, std::span<const std::byte> in) noexcept {
  auto load = [](const std::uint8_t* p, std::size_t n) {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < n; ++i) v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
    return v;
  };
  auto rotl = [](std::uint64_t x, int b) { return (x << b) | (x >> (64 - b)); };
  const std::uint64_t k0 = load(key.data(), 8), k1 = load(key.data() + 8, 8);
  std::uint64_t v0 = 0x736f6d6570736575ull ^ k0, v1 = 0x646f72616e646f6dull ^ k1;
  std::uint64_t v2 = 0x6c7967656e657261ull ^ k0, v3 = 0x7465646279746573ull ^ k1;
  auto round = [&] {
    v0 += v1;
    v1 = rotl(v1, 13);
    v1 ^= v0;
    v0 = rotl(v0, 32);
    v2 += v3;
    v3 = rotl(v3, 16);
    v3 ^= v2;
    v0 += v3;
    v3 = rotl(v3, 21);
    v3 ^= v0;
    v2 += v1;
    v1 = rotl(v1, 17);
    v1 ^= v2;
    v2 = rotl(v2, 32);
  };
  const auto* p = reinterpret_cast<const std::uint8_t*>(in.data());
  const std::size_t n = in.size(), whole = n & ~std::size_t{7};
  for (std::size_t i = 0; i < whole; i += 8) {
    const std::uint64_t m = load(p + i, 8);
    v3 ^= m;
    round();
    round();
    v0 ^= m;
  }
  const std::uint64_t last = (static_cast<std::uint64_t>(n & 0xff) << 56) | load(p + whole, n - whole);
  v3 ^= last;
  round();
  round();
  v0 ^= last;
  v2 ^= 0xff;
  round();
  round();
  round();
  round();
  return v0 ^ v1 ^ v2 ^ v3;
}

}  // namespace fabrix::detail
