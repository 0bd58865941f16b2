// The bootstrap wire format (internal). Pure encoding/decoding, no sockets.
//
// Every integer is little-endian with an explicit width. A connection starts
// with one hello (peer -> root):
//   magic u32 | kind u8 = hello | 0 u8 | version u16 | size u32 | rank u32 | token_len u32 | token
// answered by one frame, welcome or reject. After the welcome, both sides
// exchange frames:
//   magic u32 | kind u8 | op u8 | aux u16 | seq u64 | count u32, then count x (length u64 | bytes)
// contribute (peer -> root): count 1 for allgather, 0 for barrier.
// result     (root -> peer): count = job size for allgather, 0 for barrier.
// welcome:   count = job size.   reject: aux = reject_reason, count = root's size.
// abort      (root -> peer): aux = fabrix::status, one blob = a message.
// Every length read from the wire is checked against a bound before anything
// is allocated for it.
#pragma once

#include <fabrix/detail/little_endian.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fabrix::detail::boot {

inline constexpr std::uint32_t wire_magic = 0x42584246;  // bytes "FBXB"
inline constexpr std::uint16_t wire_version = 1;
inline constexpr std::size_t max_blob_bytes = std::size_t{64} << 20;
inline constexpr std::size_t max_token_bytes = 4096;
inline constexpr std::size_t max_message_bytes = 4096;
inline constexpr std::size_t hello_fixed_bytes = 20;
inline constexpr std::size_t frame_header_bytes = 20;
inline constexpr std::size_t length_bytes = 8;

enum class kind : std::uint8_t { hello = 1, welcome = 2, reject = 3, contribute = 4, result = 5, abort = 6 };
enum class op : std::uint8_t { none = 0, allgather = 1, barrier = 2 };
enum class reject_reason : std::uint16_t { version = 1, token = 2, size = 3, rank = 4, duplicate = 5 };

std::string_view to_string(op o) noexcept;
std::string_view describe(reject_reason r) noexcept;

using detail::load_le;
using detail::store_le;

// The fixed part of a hello, as read off the wire (nothing validated yet).
struct hello_prefix {
  std::uint32_t magic = 0;
  std::uint8_t kind = 0;
  std::uint16_t version = 0;
  std::uint32_t size = 0;
  std::uint32_t rank = 0;
  std::uint32_t token_len = 0;
};

// Precondition: token.size() <= max_token_bytes.
std::vector<std::byte> encode_hello(std::uint32_t size, std::uint32_t rank, std::string_view token,
                                    std::uint16_t version = wire_version);
hello_prefix decode_hello_prefix(std::span<const std::byte, hello_fixed_bytes> bytes) noexcept;

struct frame_header {
  boot::kind kind = kind::result;
  boot::op op = op::none;
  std::uint16_t aux = 0;
  std::uint64_t seq = 0;
  std::uint32_t count = 0;
};

std::array<std::byte, frame_header_bytes> encode_frame_header(const frame_header& h) noexcept;
std::array<std::byte, length_bytes> encode_length(std::uint64_t n) noexcept;

// Constant-time (in the contents) comparison of two tokens.
bool tokens_equal(std::string_view a, std::string_view b) noexcept;

// Incremental parser of one frame. The caller receives bytes straight into
// want() and reports how many arrived with commit(); blobs are allocated only
// after their length passed the bound. Not copyable across a partial read.
class frame_parser {
 public:
  // max_count bounds the header's count; max_blob bounds each length.
  explicit frame_parser(std::uint32_t max_count, std::size_t max_blob = max_blob_bytes);

  // Where the next bytes must go; empty once done() or failed().
  std::span<std::byte> want() noexcept;
  // `n` bytes (n <= want().size()) were written into want(). Returns false
  // when they made the frame malformed; error() says why.
  bool commit(std::size_t n);

  bool done() const noexcept { return stage_ == stage::done; }
  bool failed() const noexcept { return stage_ == stage::failed; }
  const std::string& error() const noexcept { return error_; }
  // Valid once done().
  const frame_header& header() const noexcept { return header_; }
  std::vector<std::vector<std::byte>>& blobs() noexcept { return blobs_; }

 private:
  enum class stage { header, length, blob, done, failed };
  bool fail(std::string message);
  void next_blob_or_done();

  std::uint32_t max_count_;
  std::size_t max_blob_;
  stage stage_ = stage::header;
  std::size_t filled_ = 0;
  std::array<std::byte, frame_header_bytes> header_bytes_{};
  std::array<std::byte, length_bytes> length_bytes_{};
  frame_header header_{};
  std::vector<std::vector<std::byte>> blobs_;
  std::string error_;
};

}  // namespace fabrix::detail::boot
