#include "wire.hpp"

#include <algorithm>
#include <vector>

namespace fabrix::detail::boot {

std::string_view to_string(op o) noexcept {
  switch (o) {
    case op::allgather: return "allgather";
    case op::barrier: return "barrier";
    case op::introduce: return "introduce";
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

namespace {

std::span<const std::byte> token_key(std::string_view token) noexcept {
  return std::as_bytes(std::span<const char>(token.data(), token.size()));
}

digest hello_mac(std::string_view token, std::span<const std::byte, hello_bytes> hello) noexcept {
  hmac_sha256 m(token_key(token));
  m.update(std::string_view("fabrix-boot-v3 hello\0", 21));
  m.update(hello.first<hello_body_bytes>());
  return m.finish();
}

std::array<std::byte, hello_bytes> encode_any_hello(std::string_view token, kind k, std::uint8_t round,
                                                    std::uint32_t size, std::uint32_t rank, const nonce& n,
                                                    std::uint16_t version) noexcept {
  std::array<std::byte, hello_bytes> out{};
  store_le<std::uint32_t>(out.data(), wire_magic);
  out[4] = std::byte(k);
  out[5] = std::byte{round};
  store_le<std::uint16_t>(out.data() + 6, version);
  store_le<std::uint32_t>(out.data() + 8, size);
  store_le<std::uint32_t>(out.data() + 12, rank);
  std::copy(n.begin(), n.end(), out.begin() + 16);
  const digest mac = hello_mac(token, out);
  std::copy(mac.begin(), mac.end(), out.begin() + hello_body_bytes);
  return out;
}

}  // namespace

std::array<std::byte, hello_bytes> encode_hello(std::string_view token, std::uint32_t size, std::uint32_t rank,
                                                const nonce& n, std::uint16_t version) noexcept {
  return encode_any_hello(token, kind::hello, 0, size, rank, n, version);
}

std::array<std::byte, hello_bytes> encode_link_hello(std::string_view token, std::uint32_t size, std::uint32_t rank,
                                                     std::uint8_t round, const nonce& n) noexcept {
  return encode_any_hello(token, kind::link_hello, round, size, rank, n, wire_version);
}

hello decode_hello(std::span<const std::byte> b) noexcept {
  hello h;
  if (b.size() < hello_prefix_bytes) return h;
  h.magic = load_le<std::uint32_t>(b.data());
  h.kind = std::to_integer<std::uint8_t>(b[4]);
  h.round = std::to_integer<std::uint8_t>(b[5]);
  h.version = load_le<std::uint16_t>(b.data() + 6);
  if (b.size() < hello_bytes) return h;
  h.size = load_le<std::uint32_t>(b.data() + 8);
  h.rank = load_le<std::uint32_t>(b.data() + 12);
  std::copy(b.begin() + 16, b.begin() + 32, h.rank_nonce.begin());
  std::copy(b.begin() + hello_body_bytes, b.begin() + hello_bytes, h.mac.begin());
  return h;
}

bool hello_vouched(std::string_view token, std::span<const std::byte, hello_bytes> bytes) noexcept {
  const digest want = hello_mac(token, bytes);
  return digests_equal(want, bytes.subspan<hello_body_bytes, mac_bytes>());
}

namespace {

// label (with its terminating NUL) | T; a link's is
// "fabrix-boot-v2 link\0" | label | T | acceptor u32 | round u8.
digest transcript_mac(std::string_view token, std::string_view label, const transcript& t) noexcept {
  std::array<std::byte, 2 + 4 + 4 + 2 * nonce_bytes> tb{};
  store_le<std::uint16_t>(tb.data(), t.version);
  store_le<std::uint32_t>(tb.data() + 2, t.size);
  store_le<std::uint32_t>(tb.data() + 6, t.rank);
  std::copy(t.rank_nonce.begin(), t.rank_nonce.end(), tb.begin() + 10);
  std::copy(t.root_nonce.begin(), t.root_nonce.end(), tb.begin() + 10 + nonce_bytes);
  hmac_sha256 m(token_key(token));
  if (t.link) m.update(std::string_view("fabrix-boot-v2 link\0", 20));
  m.update(std::string_view(label.data(), label.size() + 1));  // the literal's NUL: labels are prefix-free
  m.update(tb);
  if (t.link) {
    std::array<std::byte, 5> lb{};
    store_le<std::uint32_t>(lb.data(), t.acceptor);
    lb[4] = std::byte{t.round};
    m.update(lb);
  }
  return m.finish();
}

}  // namespace

digest challenge_mac(std::string_view token, const transcript& t) noexcept {
  return transcript_mac(token, "fabrix-boot-v2 root challenge", t);
}
digest proof_mac(std::string_view token, const transcript& t) noexcept {
  return transcript_mac(token, "fabrix-boot-v2 rank proof", t);
}
digest session_key(std::string_view token, const transcript& t) noexcept {
  return transcript_mac(token, "fabrix-boot-v2 session key", t);
}

challenge_check answer_challenge(std::string_view token, transcript& t, frame_parser& challenge, proof_frame& proof,
                                 session& s) noexcept {
  const auto& h = challenge.header();
  const auto& b = challenge.blobs();
  if (!challenge.done() || h.kind != kind::challenge || h.count != 2 || b.size() != 2 || b[0].size() != nonce_bytes ||
      b[1].size() != mac_bytes)
    return challenge_check::not_a_challenge;
  std::copy(b[0].begin(), b[0].end(), t.root_nonce.begin());
  if (!digests_equal(challenge_mac(token, t), std::span<const std::byte, mac_bytes>(b[1].data(), mac_bytes)))
    return challenge_check::forged;
  proof.head = encode_frame_header({kind::proof, op::none, 0, 0, 1});
  proof.length = encode_length(mac_bytes);
  proof.mac = proof_mac(token, t);
  s = session{};
  s.key = session_key(token, t);
  s.outgoing = direction::rank_to_root;
  return challenge_check::ok;
}

void payload_hash::add(std::span<const std::byte> blob) noexcept {
  h_.update(encode_length(blob.size()));
  h_.update(blob);
}

digest payload_digest(std::span<const std::vector<std::byte>> blobs) noexcept {
  payload_hash h;
  for (const auto& b : blobs) h.add(b);
  return h.finish();
}

digest frame_mac(const digest& key, direction d, std::uint64_t counter,
                 std::span<const std::byte, frame_header_bytes> header, const digest& payload) noexcept {
  hmac_sha256 m(key);
  m.update(d == direction::root_to_rank ? std::string_view("root->rank") : std::string_view("rank->root"));
  m.update(encode_length(counter));
  m.update(header);
  m.update(payload);
  return m.finish();
}

digest session::seal(std::span<const std::byte, frame_header_bytes> header, const digest& payload) noexcept {
  return frame_mac(key, outgoing, sent++, header, payload);
}

bool session::open(std::span<const std::byte, frame_header_bytes> header, const digest& payload,
                   std::span<const std::byte, mac_bytes> mac) noexcept {
  const digest want = frame_mac(key, incoming(), received, header, payload);
  if (!digests_equal(want, mac)) return false;
  ++received;
  return true;
}

bool frame_parser::authentic(session& s) const noexcept {
  if (!done() || !with_mac_) return false;
  return s.open(raw_header(), payload_digest(blobs_), mac());
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

frame_parser::frame_parser(std::uint32_t max_count, std::size_t max_blob, bool with_mac)
    : max_count_(max_count), max_blob_(max_blob), with_mac_(with_mac) {}

std::span<std::byte> frame_parser::want() noexcept {
  switch (stage_) {
    case stage::header: return std::span<std::byte>(header_bytes_).subspan(filled_);
    case stage::length: return std::span<std::byte>(length_bytes_).subspan(filled_);
    case stage::blob: return std::span<std::byte>(blobs_.back()).subspan(filled_);
    case stage::mac: return std::span<std::byte>(mac_).subspan(filled_);
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
  stage_ = blobs_.size() < header_.count ? stage::length : with_mac_ ? stage::mac : stage::done;
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
      if (k < static_cast<std::uint8_t>(kind::welcome) || k > static_cast<std::uint8_t>(kind::proof))
        return fail("unknown frame kind " + std::to_string(k));
      const auto o = std::to_integer<std::uint8_t>(p[5]);
      if (o > static_cast<std::uint8_t>(op::introduce)) return fail("unknown operation " + std::to_string(o));
      header_.kind = static_cast<kind>(k);
      header_.op = static_cast<op>(o);
      header_.aux = load_le<std::uint16_t>(p + 6);
      header_.seq = load_le<std::uint64_t>(p + 8);
      header_.count = load_le<std::uint32_t>(p + 16);
      // welcome and reject carry the job size in count and no blobs.
      if (header_.kind == kind::welcome || header_.kind == kind::reject) {
        filled_ = 0;
        stage_ = with_mac_ ? stage::mac : stage::done;
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
    case stage::mac:
      if (filled_ == mac_bytes) stage_ = stage::done;
      return true;
    case stage::done:
    case stage::failed: break;
  }
  return stage_ != stage::failed;
}

}  // namespace fabrix::detail::boot
