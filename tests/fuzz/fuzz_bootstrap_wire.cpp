// The bootstrap's decoders of bytes from the network: the frame parser (fed
// in arbitrary chunk sizes taken from the input itself) must end in done or
// failed, never allocate past its bounds, and give back exactly the blobs
// the frame announced; a hello prefix decodes without reading past 20 bytes.
#include "fuzz.hpp"

#include "../../src/bootstrap/wire.hpp"

#include <algorithm>
#include <cstring>

namespace boot = fabrix::detail::boot;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::size_t chunk = 1 + data[0] % 32;  // first byte: how the bytes trickle in
  const auto* in = reinterpret_cast<const std::byte*>(data + 1);
  const std::size_t n = size - 1;
  boot::frame_parser parser(/*max_count=*/8, /*max_blob=*/4096);
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
  }
  if (n >= boot::hello_fixed_bytes) {
    const auto h =
        boot::decode_hello_prefix(std::span<const std::byte, boot::hello_fixed_bytes>(in, boot::hello_fixed_bytes));
    (void)h;
  }
  return 0;
}

std::vector<fuzz_input> fabrix_fuzz_seeds() {
  std::vector<fuzz_input> seeds;
  boot::frame_header h{boot::kind::result, boot::op::allgather, 0, 7, 2};
  fuzz_input frame{5};  // chunk size byte
  const auto header = boot::encode_frame_header(h);
  for (std::byte b : header) frame.push_back(std::to_integer<std::uint8_t>(b));
  for (std::uint64_t len : {3, 0}) {
    for (std::byte b : boot::encode_length(len)) frame.push_back(std::to_integer<std::uint8_t>(b));
    for (std::uint64_t i = 0; i < len; ++i) frame.push_back(static_cast<std::uint8_t>('a' + i));
  }
  seeds.push_back(frame);
  fuzz_input hello{1};
  for (std::byte b : boot::encode_hello(4, 1, "token")) hello.push_back(std::to_integer<std::uint8_t>(b));
  seeds.push_back(hello);
  return seeds;
}
