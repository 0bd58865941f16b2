// Little-endian integers at explicit widths: how every fabrix wire format
// (remote_buffer, address blobs, the bootstrap) writes numbers. Callers check
// sizes first; nothing here bounds-checks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace fabrix::detail {

template <class T>
void store_le(std::byte* p, T v) noexcept {
  for (std::size_t i = 0; i < sizeof(T); ++i)
    p[i] = static_cast<std::byte>((static_cast<std::uint64_t>(v) >> (8 * i)) & 0xff);
}

template <class T>
T load_le(const std::byte* p) noexcept {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i)
    v |= static_cast<std::uint64_t>(static_cast<std::uint8_t>(p[i])) << (8 * i);
  return static_cast<T>(v);
}

// A cursor that writes fields one after another.
class le_writer {
 public:
  explicit le_writer(std::byte* p) noexcept : p_(p) {}
  template <class T>
  void put(T v) noexcept {
    store_le<T>(p_, v);
    p_ += sizeof(T);
  }
  void put_bytes(const std::byte* src, std::size_t n) noexcept {
    if (n) std::memcpy(p_, src, n);
    p_ += n;
  }
  std::byte* position() const noexcept { return p_; }

 private:
  std::byte* p_;
};

// A cursor that reads fields one after another.
class le_reader {
 public:
  explicit le_reader(const std::byte* p) noexcept : p_(p) {}
  template <class T>
  T get() noexcept {
    const T v = load_le<T>(p_);
    p_ += sizeof(T);
    return v;
  }
  const std::byte* position() const noexcept { return p_; }
  void skip(std::size_t n) noexcept { p_ += n; }

 private:
  const std::byte* p_;
};

}  // namespace fabrix::detail
