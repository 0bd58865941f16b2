// The bootstrap's decoders of bytes from the network: the frame parser (fed
// in arbitrary chunk sizes taken from the input itself, with or without the
// MAC trailer of an authenticated connection) must end in done or failed,
// never allocate past its bounds, and give back exactly the blobs the frame
// announced; a frame whose trailer was not made with the session key is
// never authentic; a hello decodes from any prefix without reading past it.
#include "fuzz.hpp"

#include "../../src/bootstrap/wire.hpp"

#include <algorithm>
#include <cstring>

namespace boot = fabrix::detail::boot;

namespace {

boot::session fixed_session(boot::direction outgoing) {
  boot::transcript t;
  t.size = 4;
  t.rank = 1;
  t.rank_nonce.fill(std::byte{1});
  t.root_nonce.fill(std::byte{2});
  boot::session s;
  s.key = boot::session_key("fuzz-token", t);
  s.outgoing = outgoing;
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::size_t chunk = 1 + data[0] % 32;   // first byte: how the bytes trickle in,
  const bool with_mac = (data[0] & 0x80) != 0;  // and whether a MAC trailer follows
  const auto* in = reinterpret_cast<const std::byte*>(data + 1);
  const std::size_t n = size - 1;
  boot::frame_parser parser(/*max_count=*/8, /*max_blob=*/4096, with_mac);
  std::size_t used = 0;
  while (!parser.done() && !parser.failed() && used < n) {
    auto want = parser.want();
    FUZZ_ASSERT(!want.empty());
    const std::size_t take = std::min({want.size(), chunk, n - used});
    std::memcpy(want.data(), in + used, take);
    used += take;
    if (!parser.commit(take)) FUZZ_ASSERT(parser.failed() && !parser.error().empty());
  }
  if (parser.done()) {
    const auto& h = parser.header();
    if (h.kind == boot::kind::welcome || h.kind == boot::kind::reject) {  // count is the job size there
      FUZZ_ASSERT(parser.blobs().empty());
    } else {
      FUZZ_ASSERT(h.count <= 8);
      FUZZ_ASSERT(parser.blobs().size() == h.count);
    }
    for (const auto& b : parser.blobs()) FUZZ_ASSERT(b.size() <= 4096);
    FUZZ_ASSERT(parser.want().empty());
    // The seeds carry trailers made with the session key; anything the
    // fuzzer changed in them must not verify (nor may a reflected frame).
    auto s = fixed_session(boot::direction::rank_to_root);
    const bool ok = parser.authentic(s);
    if (!with_mac) FUZZ_ASSERT(!ok);
    if (ok) {
      FUZZ_ASSERT(s.received == 1);
      auto reflected = fixed_session(boot::direction::root_to_rank);
      FUZZ_ASSERT(!parser.authentic(reflected));
    }
  }
  const auto h = boot::decode_hello(std::span<const std::byte>(in, n));
  if (n < boot::hello_prefix_bytes) FUZZ_ASSERT(h.magic == 0 && h.version == 0);
  return 0;
}

std::vector<fuzz_input> fabrix_fuzz_seeds() {
  std::vector<fuzz_input> seeds;
  const auto push = [](fuzz_input& f, std::span<const std::byte> bytes) {
    for (std::byte b : bytes) f.push_back(std::to_integer<std::uint8_t>(b));
  };
  // A result frame with two blobs, without and with its trailer.
  for (bool mac : {false, true}) {
    boot::frame_header h{boot::kind::result, boot::op::allgather, 0, 7, 2};
    fuzz_input frame{static_cast<std::uint8_t>(mac ? 0x85 : 5)};  // chunk size, MAC bit
    const auto header = boot::encode_frame_header(h);
    push(frame, header);
    std::vector<std::vector<std::byte>> blobs{{std::byte{'a'}, std::byte{'b'}, std::byte{'c'}}, {}};
    for (const auto& b : blobs) {
      push(frame, boot::encode_length(b.size()));
      push(frame, b);
    }
    if (mac) {
      auto s = fixed_session(boot::direction::root_to_rank);
      push(frame, s.seal(header, boot::payload_digest(blobs)));
    }
    seeds.push_back(frame);
  }
  // A welcome with its trailer.
  {
    fuzz_input frame{0x81};
    const auto header = boot::encode_frame_header({boot::kind::welcome, boot::op::none, 0, 0, 4});
    push(frame, header);
    auto s = fixed_session(boot::direction::root_to_rank);
    push(frame, s.seal(header, boot::payload_digest({})));
    seeds.push_back(frame);
  }
  fuzz_input hello{1};
  boot::nonce n{};
  n.fill(std::byte{7});
  push(hello, boot::encode_hello("fuzz", 4, 1, n));
  seeds.push_back(hello);
  return seeds;
}
