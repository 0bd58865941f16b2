// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104) for the bootstrap's
// authentication (internal). Written here because fabrix takes no crypto
// dependency; checked against the FIPS and RFC 4231 test vectors in
// tests/unit/test_bootstrap.cpp. Not constant-time in the message length,
// which is public anyway; the key never selects a branch or an address.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace fabrix::detail::boot {

inline constexpr std::size_t digest_bytes = 32;
using digest = std::array<std::byte, digest_bytes>;

class sha256 {
 public:
  sha256() noexcept;
  void update(std::span<const std::byte> in) noexcept;
  void update(std::string_view in) noexcept;
  digest finish() noexcept;

 private:
  void block(const std::uint8_t* p) noexcept;
  std::array<std::uint32_t, 8> h_;
  std::array<std::uint8_t, 64> buf_{};
  std::size_t used_ = 0;
  std::uint64_t total_ = 0;
};

digest sha256_of(std::span<const std::byte> in) noexcept;

// HMAC-SHA256 fed in pieces.
class hmac_sha256 {
 public:
  explicit hmac_sha256(std::span<const std::byte> key) noexcept;
  void update(std::span<const std::byte> in) noexcept { inner_.update(in); }
  void update(std::string_view in) noexcept { inner_.update(in); }
  digest finish() noexcept;

 private:
  sha256 inner_;
  std::array<std::uint8_t, 64> outer_key_{};
};

// Constant-time comparison of two digests.
bool digests_equal(std::span<const std::byte, digest_bytes> a, std::span<const std::byte, digest_bytes> b) noexcept;

// Fills `out` from the kernel's random source (getrandom, else
// /dev/urandom). False when neither works.
bool random_bytes(std::span<std::byte> out) noexcept;

}  // namespace fabrix::detail::boot
