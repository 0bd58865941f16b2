// The bootstrap wire format (internal). Pure encoding/decoding and the MACs
// over it; no sockets.
//
// Every integer is little-endian with an explicit width. Version 4 (version 1
// sent the job token in clear, version 2's hello had no MAC, version 3 formed
// the peer-to-peer links through an introduce round on the first collective;
// older peers get a version reject).
//
// Handshake: mutual challenge-response keyed with the job token; the token
// itself never travels.
//   hello     (rank -> root, 64 bytes):
//             magic u32 | kind u8 = hello | 0 u8 | version u16 | size u32 | rank u32 | rank_nonce[16] |
//             hello_mac[32]
//   challenge (root -> rank): a frame (below), count 2: root_nonce[16], root_mac[32]
//   proof     (rank -> root): a frame, count 1: rank_mac[32]
// with T = version u16 | size u32 | rank u32 | rank_nonce | root_nonce (size and
// rank as the hello claimed them) and HMAC-SHA256 keyed with the token:
//   root_mac    = HMAC(token, "fabrix-boot-v2 root challenge\0" | T)
//   rank_mac    = HMAC(token, "fabrix-boot-v2 rank proof\0" | T)
//   session key = HMAC(token, "fabrix-boot-v2 session key\0" | T)
//   hello_mac   = HMAC(token, "fabrix-boot-v3 hello\0" | the hello's first 32 bytes)
// hello_mac authenticates nothing (a hello can be replayed); it is a hint:
// rank 0 serves hellos that carry a good one before others when a flood of
// connections that never authenticate fills its bounds (root.cpp), so a
// stranger on the same host cannot crowd a real rank out. It is a MAC over
// public values under a label of its own, as the root's challenge is (which
// rank 0 gives anyone who sends a hello): a process squatting on rank 0's
// port learns nothing from it that it could not learn from the real rank 0.
// The rank checks root_mac before it answers: a root that does not know the
// token gets a hello (public values, a nonce and hello_mac) and nothing else. Rank 0
// checks rank_mac before it looks at the claimed size and rank.
//
// Frames: magic u32 | kind u8 | op u8 | aux u16 | seq u64 | count u32, then
// count x (length u64 | bytes), then, once the handshake is done, a 32-byte
// trailer:
//   HMAC(session key, direction label | counter u64 | header[20] | SHA-256(payload))
// payload = the count x (length | bytes) that follow the header; the counter
// counts the frames sent on this connection in that direction, from 0, so a
// frame cannot be replayed, reordered, moved to another connection or sent
// back the other way.
// contribute (rank -> root): count 1 for allgather, 0 for barrier.
// result     (root -> rank): count = job size for allgather, 0 for barrier.
// welcome:   count = job size, aux = the exchange rank 0 chose (exchange_wire).
// reject:    aux = reject_reason, count = root's size.
// introduce  (op of a contribute/result pair, seq 0, peer-to-peer exchange
//            only, right after the welcome): a rank sends rank 0 its link
//            listener's "host:port"; rank 0 answers each with a result of
//            count 0 once it has every address, then closes the connection.
//
// Tree (peer-to-peer exchange, tree.cpp): rank 0 then sends the table of
// every rank's link address down a binomial tree: rank r passes it to ranks
// r + 2^k for every 2^k > r (rank 0: every 2^k) below size, over a link
// handshake (below) with k = tree_round, then a frame: result, op
// introduce, seq 0, count = size, blob i = rank i's address.
//
// Links (peer-to-peer exchange, links.cpp): rank r connects, for each round
// k, to rank (r - 2^k) mod size and sends a link hello: the hello layout
// with kind = link_hello and byte 5 = k (hello_mac covers both; k =
// tree_round for the tree). The same challenge, proof and
// session follow, with the acceptor's rank and k added to T and "link" in
// the labels, so a link handshake never passes for a root one or for
// another pair or round. Then frames as above: contribute, aux = k.
// abort      (root -> rank): aux = fabrix::status, one blob = a message.
// Only a version reject is sent before the handshake (without a trailer); the
// rank treats it as a hint and keeps retrying.
// Every length read from the wire is checked against a bound before anything
// is allocated for it.
#pragma once

#include "hmac.hpp"

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
inline constexpr std::uint16_t wire_version = 4;
// The link hello's round byte on the tree's connections (link rounds are < 64).
inline constexpr std::uint8_t tree_round = 255;
// Bound on a link listener's "host:port" read from the wire.
inline constexpr std::size_t max_address_bytes = 300;
inline constexpr std::size_t max_blob_bytes = std::size_t{64} << 20;
inline constexpr std::size_t max_token_bytes = 4096;
inline constexpr std::size_t max_message_bytes = 4096;
inline constexpr std::size_t nonce_bytes = 16;
inline constexpr std::size_t hello_prefix_bytes = 8;  // magic, kind, 0, version
inline constexpr std::size_t hello_body_bytes = 32;   // what hello_mac covers
inline constexpr std::size_t hello_bytes = 64;        // body | hello_mac
inline constexpr std::size_t frame_header_bytes = 20;
inline constexpr std::size_t length_bytes = 8;
inline constexpr std::size_t mac_bytes = digest_bytes;

enum class kind : std::uint8_t {
  hello = 1,
  welcome = 2,
  reject = 3,
  contribute = 4,
  result = 5,
  abort = 6,
  challenge = 7,
  proof = 8,
  link_hello = 9
};
enum class op : std::uint8_t { none = 0, allgather = 1, barrier = 2, introduce = 3 };
// The exchange carried in the welcome's aux.
inline constexpr std::uint16_t exchange_star = 1;
inline constexpr std::uint16_t exchange_peer_to_peer = 2;
enum class reject_reason : std::uint16_t { version = 1, token = 2, size = 3, rank = 4, duplicate = 5 };

std::string_view to_string(op o) noexcept;
std::string_view describe(reject_reason r) noexcept;

using detail::load_le;
using detail::store_le;

using nonce = std::array<std::byte, nonce_bytes>;

// A hello as read off the wire (nothing validated yet).
struct hello {
  std::uint32_t magic = 0;
  std::uint8_t kind = 0;
  std::uint16_t version = 0;
  std::uint8_t round = 0;  // link hello only
  std::uint32_t size = 0;
  std::uint32_t rank = 0;
  nonce rank_nonce{};
  digest mac{};
};

std::array<std::byte, hello_bytes> encode_hello(std::string_view token, std::uint32_t size, std::uint32_t rank,
                                                const nonce& n, std::uint16_t version = wire_version) noexcept;
std::array<std::byte, hello_bytes> encode_link_hello(std::string_view token, std::uint32_t size, std::uint32_t rank,
                                                     std::uint8_t round, const nonce& n) noexcept;
// Reads the first hello_prefix_bytes (magic, kind, version) and, when
// `bytes` has hello_bytes, the rest.
hello decode_hello(std::span<const std::byte> bytes) noexcept;
// Whether a whole hello's hello_mac was made with `token`.
bool hello_vouched(std::string_view token, std::span<const std::byte, hello_bytes> bytes) noexcept;

// What both ends of a handshake agree on (T above).
struct transcript {
  std::uint16_t version = wire_version;
  std::uint32_t size = 0;
  std::uint32_t rank = 0;
  nonce rank_nonce{};
  nonce root_nonce{};
  // Links only: rank = the connecting rank, acceptor = the accepting one
  // ("root" in the functions below), round = k.
  bool link = false;
  std::uint32_t acceptor = 0;
  std::uint8_t round = 0;
};
digest challenge_mac(std::string_view token, const transcript& t) noexcept;
digest proof_mac(std::string_view token, const transcript& t) noexcept;
digest session_key(std::string_view token, const transcript& t) noexcept;

struct frame_header {
  boot::kind kind = kind::result;
  boot::op op = op::none;
  std::uint16_t aux = 0;
  std::uint64_t seq = 0;
  std::uint32_t count = 0;
};

std::array<std::byte, frame_header_bytes> encode_frame_header(const frame_header& h) noexcept;
std::array<std::byte, length_bytes> encode_length(std::uint64_t n) noexcept;

// SHA-256 of a frame's payload: each blob as length u64 | bytes.
class payload_hash {
 public:
  void add(std::span<const std::byte> blob) noexcept;
  digest finish() noexcept { return h_.finish(); }

 private:
  sha256 h_;
};
digest payload_digest(std::span<const std::vector<std::byte>> blobs) noexcept;

enum class direction : std::uint8_t { root_to_rank, rank_to_root };

// One end of an authenticated connection: the session key and the frames
// counted so far in each direction.
struct session {
  digest key{};
  direction outgoing = direction::rank_to_root;
  std::uint64_t sent = 0;
  std::uint64_t received = 0;

  direction incoming() const noexcept {
    return outgoing == direction::root_to_rank ? direction::rank_to_root : direction::root_to_rank;
  }
  // The trailer of the next frame sent (counts it).
  digest seal(std::span<const std::byte, frame_header_bytes> header, const digest& payload) noexcept;
  // Whether `mac` is the trailer of the next frame expected (counts it when so).
  bool open(std::span<const std::byte, frame_header_bytes> header, const digest& payload,
            std::span<const std::byte, mac_bytes> mac) noexcept;
};
digest frame_mac(const digest& key, direction d, std::uint64_t counter,
                 std::span<const std::byte, frame_header_bytes> header, const digest& payload) noexcept;

// The connecting end of a handshake, after its hello: `challenge` (a whole
// frame) must be {acceptor nonce, challenge_mac} proving the job token. On
// ok, t.root_nonce is the acceptor's nonce, `proof` is the frame to send
// next and `s` the connector's session (rank_to_root, nothing counted yet).
// Used by a rank joining rank 0, by a link and by the tree.
enum class challenge_check { ok, not_a_challenge, forged };
struct proof_frame {
  std::array<std::byte, frame_header_bytes> head{};
  std::array<std::byte, length_bytes> length{};
  digest mac{};
};
class frame_parser;
challenge_check answer_challenge(std::string_view token, transcript& t, frame_parser& challenge, proof_frame& proof,
                                 session& s) noexcept;

// Incremental parser of one frame. The caller receives bytes straight into
// want() and reports how many arrived with commit(); blobs are allocated only
// after their length passed the bound. Not copyable across a partial read.
class frame_parser {
 public:
  // max_count bounds the header's count; max_blob bounds each length;
  // with_mac: a mac_bytes trailer follows the payload (after the handshake).
  explicit frame_parser(std::uint32_t max_count, std::size_t max_blob = max_blob_bytes, bool with_mac = false);

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
  std::span<const std::byte, frame_header_bytes> raw_header() const noexcept { return header_bytes_; }
  // The trailer (zeros without with_mac).
  std::span<const std::byte, mac_bytes> mac() const noexcept { return mac_; }
  // Valid once done() with_mac: whether the trailer authenticates this frame
  // as the next one of `s` (counts it when so).
  bool authentic(session& s) const noexcept;

 private:
  enum class stage { header, length, blob, mac, done, failed };
  bool fail(std::string message);
  void next_blob_or_done();

  std::uint32_t max_count_;
  std::size_t max_blob_;
  bool with_mac_;
  stage stage_ = stage::header;
  std::size_t filled_ = 0;
  std::array<std::byte, frame_header_bytes> header_bytes_{};
  std::array<std::byte, length_bytes> length_bytes_{};
  std::array<std::byte, mac_bytes> mac_{};
  frame_header header_{};
  std::vector<std::vector<std::byte>> blobs_;
  std::string error_;
};

}  // namespace fabrix::detail::boot
