#include "hmac.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>

#include <algorithm>

namespace fabrix::detail::boot {

namespace {

constexpr std::uint32_t k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

constexpr std::uint32_t rotr(std::uint32_t x, int n) noexcept { return (x >> n) | (x << (32 - n)); }

}  // namespace

sha256::sha256() noexcept
    : h_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19} {}

void sha256::block(const std::uint8_t* p) noexcept {
  std::uint32_t w[64];
  for (int i = 0; i < 16; ++i)
    w[i] = (std::uint32_t{p[4 * i]} << 24) | (std::uint32_t{p[4 * i + 1]} << 16) | (std::uint32_t{p[4 * i + 2]} << 8) |
           std::uint32_t{p[4 * i + 3]};
  for (int i = 16; i < 64; ++i) {
    const std::uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    const std::uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  std::uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6], h = h_[7];
  for (int i = 0; i < 64; ++i) {
    const std::uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + k[i] + w[i];
    const std::uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h_[0] += a;
  h_[1] += b;
  h_[2] += c;
  h_[3] += d;
  h_[4] += e;
  h_[5] += f;
  h_[6] += g;
  h_[7] += h;
}

void sha256::update(std::span<const std::byte> in) noexcept {
  if (in.empty()) return;  // its data() may be null, which memcpy must not see
  const auto* p = reinterpret_cast<const std::uint8_t*>(in.data());
  std::size_t n = in.size();
  total_ += n;
  if (used_ > 0) {
    const std::size_t take = std::min(n, buf_.size() - used_);
    std::memcpy(buf_.data() + used_, p, take);
    used_ += take;
    p += take;
    n -= take;
    if (used_ < buf_.size()) return;
    block(buf_.data());
    used_ = 0;
  }
  for (; n >= 64; p += 64, n -= 64) block(p);
  if (n > 0) std::memcpy(buf_.data(), p, n);
  used_ = n;
}

void sha256::update(std::string_view in) noexcept {
  update(std::as_bytes(std::span<const char>(in.data(), in.size())));
}

digest sha256::finish() noexcept {
  const std::uint64_t bits = total_ * 8;
  buf_[used_++] = 0x80;
  if (used_ > 56) {
    std::memset(buf_.data() + used_, 0, 64 - used_);
    block(buf_.data());
    used_ = 0;
  }
  std::memset(buf_.data() + used_, 0, 56 - used_);
  for (int i = 0; i < 8; ++i) buf_[56 + i] = static_cast<std::uint8_t>(bits >> (56 - 8 * i));
  block(buf_.data());
  digest out;
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 4; ++j) out[4 * i + j] = static_cast<std::byte>(h_[i] >> (24 - 8 * j));
  return out;
}

digest sha256_of(std::span<const std::byte> in) noexcept {
  sha256 s;
  s.update(in);
  return s.finish();
}

hmac_sha256::hmac_sha256(std::span<const std::byte> key) noexcept {
  std::array<std::uint8_t, 64> k0{};
  if (key.size() > k0.size()) {
    const digest d = sha256_of(key);
    std::memcpy(k0.data(), d.data(), d.size());
  } else if (!key.empty()) {
    std::memcpy(k0.data(), key.data(), key.size());
  }
  std::array<std::byte, 64> ipad;
  for (std::size_t i = 0; i < 64; ++i) {
    ipad[i] = static_cast<std::byte>(k0[i] ^ 0x36);
    outer_key_[i] = static_cast<std::uint8_t>(k0[i] ^ 0x5c);
  }
  inner_.update(ipad);
}

digest hmac_sha256::finish() noexcept {
  const digest in = inner_.finish();
  sha256 outer;
  outer.update(std::as_bytes(std::span(outer_key_)));
  outer.update(in);
  return outer.finish();
}

bool digests_equal(std::span<const std::byte, digest_bytes> a, std::span<const std::byte, digest_bytes> b) noexcept {
  unsigned diff = 0;
  for (std::size_t i = 0; i < digest_bytes; ++i) diff |= std::to_integer<unsigned>(a[i] ^ b[i]);
  return diff == 0;
}

bool random_bytes(std::span<std::byte> out) noexcept {
  std::size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = ::getrandom(out.data() + got, out.size() - got, 0);
    if (n > 0) {
      got += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;
  }
  if (got == out.size()) return true;
  const int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  while (got < out.size()) {
    const ssize_t n = ::read(fd, out.data() + got, out.size() - got);
    if (n > 0) {
      got += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;
  }
  ::close(fd);
  return got == out.size();
}

}  // namespace fabrix::detail::boot
