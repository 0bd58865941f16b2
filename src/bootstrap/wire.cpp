#include "wire.hpp"

#include <algorithm>

namespace fabrix::detail::boot {

std::string_view to_string(op o) noexcept {
  switch (o) {
    case op::allgather: return "allgather";
    case op::barrier: return "barrier";
    case op::none: break;
  }
  return "none";
}

std::string_view describe(reject_reason r) noexcept {
  switch (r) {
    case reject_reason::version: return "protocol version mismatch";
    case reject_reason::token: return "job token mismatch";
    case reject_reason::size: return "job size mismatch";
    case reject_reason::rank: return "rank out of range";
    case reject_reason::duplicate: return "another process already joined with this rank";
  }
  return "unknown reason";
}

std::vector<std::byte> encode_hello(std::uint32_t size, std::uint32_t rank, std::string_view token,
                                    std::uint16_t version) {
  std::vector<std::byte> out(hello_fixed_bytes + token.size());
  store_le<std::uint32_t>(out.data(), wire_magic);
  out[4] = std::byte(kind::hello);
  out[5] = std::byte{0};
  store_le<std::uint16_t>(out.data() + 6, version);
  store_le<std::uint32_t>(out.data() + 8, size);
  store_le<std::uint32_t>(out.data() + 12, rank);
  store_le<std::uint32_t>(out.data() + 16, static_cast<std::uint32_t>(token.size()));
  std::transform(token.begin(), token.end(), out.begin() + hello_fixed_bytes,
                 [](char c) { return static_cast<std::byte>(c); });
  return out;
}

hello_prefix decode_hello_prefix(std::span<const std::byte, hello_fixed_bytes> b) noexcept {
  hello_prefix h;
  h.magic = load_le<std::uint32_t>(b.data());
  h.kind = std::to_integer<std::uint8_t>(b[4]);
  h.version = load_le<std::uint16_t>(b.data() + 6);
  h.size = load_le<std::uint32_t>(b.data() + 8);
  h.rank = load_le<std::uint32_t>(b.data() + 12);
  h.token_len = load_le<std::uint32_t>(b.data() + 16);
  return h;
}

std::array<std::byte, frame_header_bytes> encode_frame_header(const frame_header& h) noexcept {
  std::array<std::byte, frame_header_bytes> out{};
  store_le<std::uint32_t>(out.data(), wire_magic);
  out[4] = std::byte(h.kind);
  out[5] = std::byte(h.op);
  store_le<std::uint16_t>(out.data() + 6, h.aux);
  store_le<std::uint64_t>(out.data() + 8, h.seq);
  store_le<std::uint32_t>(out.data() + 16, h.count);
  return out;
}

std::array<std::byte, length_bytes> encode_length(std::uint64_t n) noexcept {
  std::array<std::byte, length_bytes> out{};
  store_le<std::uint64_t>(out.data(), n);
  return out;
}

bool tokens_equal(std::string_view a, std::string_view b) noexcept {
  // Touches every byte of `b` whatever the contents; only the lengths leak.
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  for (std::size_t i = 0; i < b.size(); ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0u;
    diff |= static_cast<unsigned>(x ^ static_cast<unsigned char>(b[i]));
  }
  return diff == 0;
}

frame_parser::frame_parser(std::uint32_t max_count, std::size_t max_blob)
    : max_count_(max_count), max_blob_(max_blob) {}

std::span<std::byte> frame_parser::want() noexcept {
  switch (stage_) {
    case stage::header: return std::span<std::byte>(header_bytes_).subspan(filled_);
    case stage::length: return std::span<std::byte>(length_bytes_).subspan(filled_);
    case stage::blob: return std::span<std::byte>(blobs_.back()).subspan(filled_);
    case stage::done:
    case stage::failed: break;
  }
  return {};
}

bool frame_parser::fail(std::string message) {
  stage_ = stage::failed;
  error_ = std::move(message);
  return false;
}

void frame_parser::next_blob_or_done() {
  filled_ = 0;
  stage_ = blobs_.size() < header_.count ? stage::length : stage::done;
}

bool frame_parser::commit(std::size_t n) {
  if (stage_ == stage::done) return true;
  if (stage_ == stage::failed) return false;
  filled_ += n;
  switch (stage_) {
    case stage::header: {
      if (filled_ < frame_header_bytes) return true;
      const auto* p = header_bytes_.data();
      if (load_le<std::uint32_t>(p) != wire_magic) return fail("bad magic (not a fabrix bootstrap stream)");
      const auto k = std::to_integer<std::uint8_t>(p[4]);
      if (k < static_cast<std::uint8_t>(kind::welcome) || k > static_cast<std::uint8_t>(kind::abort))
        return fail("unknown frame kind " + std::to_string(k));
      const auto o = std::to_integer<std::uint8_t>(p[5]);
      if (o > static_cast<std::uint8_t>(op::barrier)) return fail("unknown operation " + std::to_string(o));
      header_.kind = static_cast<kind>(k);
      header_.op = static_cast<op>(o);
      header_.aux = load_le<std::uint16_t>(p + 6);
      header_.seq = load_le<std::uint64_t>(p + 8);
      header_.count = load_le<std::uint32_t>(p + 16);
      // welcome and reject carry the job size in count and no blobs.
      if (header_.kind == kind::welcome || header_.kind == kind::reject) {
        stage_ = stage::done;
        return true;
      }
      if (header_.count > max_count_)
        return fail("frame announces " + std::to_string(header_.count) + " blobs, at most " +
                    std::to_string(max_count_) + " expected");
      blobs_.reserve(header_.count);
      next_blob_or_done();
      return true;
    }
    case stage::length: {
      if (filled_ < length_bytes) return true;
      const std::uint64_t len = load_le<std::uint64_t>(length_bytes_.data());
      if (len > max_blob_)
        return fail("blob " + std::to_string(blobs_.size()) + " announces " + std::to_string(len) +
                    " bytes, more than the limit of " + std::to_string(max_blob_));
      blobs_.emplace_back(static_cast<std::size_t>(len));
      filled_ = 0;
      if (len == 0)
        next_blob_or_done();
      else
        stage_ = stage::blob;
      return true;
    }
    case stage::blob:
      if (filled_ == blobs_.back().size()) next_blob_or_done();
      return true;
    case stage::done:
    case stage::failed: break;
  }
  return stage_ != stage::failed;
}

}  // namespace fabrix::detail::boot
