// remote_buffer::decode: never reads out of bounds; whatever it accepts
// encodes back to exactly the same bytes. Each input is also tried with its
// checksum repaired, so the checks behind the checksum get fuzzed too.
#include "fuzz.hpp"

#include <fabrix/remote_buffer.hpp>

#include <cstring>

namespace {
void check(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);
  auto rb = fabrix::remote_buffer::decode(in);
  if (!rb) {
    FUZZ_ASSERT(rb.code() == fabrix::status::invalid_argument);
    FUZZ_ASSERT(!rb.error().message.empty());
    return;
  }
  FUZZ_ASSERT(rb->key_size <= fabrix::remote_buffer::max_key_size);
  FUZZ_ASSERT(rb->length > 0 && rb->address + rb->length >= rb->address);
  const auto again = rb->encode();
  FUZZ_ASSERT(again.size() == size && std::memcmp(again.data(), data, size) == 0);
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  check(data, size);
  if (size >= fabrix::remote_buffer::checksum_size) {
    std::vector<std::uint8_t> fixed(data, data + size);
    const std::size_t body = size - fabrix::remote_buffer::checksum_size;
    std::uint64_t sum = fabrix::detail::fnv1a(std::span(reinterpret_cast<const std::byte*>(fixed.data()), body));
    for (int i = 0; i < 8; ++i) fixed[body + i] = static_cast<std::uint8_t>(sum >> (8 * i));
    check(fixed.data(), fixed.size());
  }
  return 0;
}

std::vector<fuzz_input> fabrix_fuzz_seeds() {
  std::vector<fuzz_input> seeds;
  for (std::uint16_t key_size : {0, 10, 64}) {
    fabrix::remote_buffer rb;
    rb.provider = fabrix::provider_id::ucx;
    rb.rights = fabrix::access::all_remote;
    rb.address = 0x10000;
    rb.length = 4096;
    rb.owner = 1;
    rb.epoch = 2;
    rb.key_size = key_size;
    const auto blob = rb.encode();
    seeds.emplace_back(reinterpret_cast<const std::uint8_t*>(blob.data()),
                       reinterpret_cast<const std::uint8_t*>(blob.data()) + blob.size());
  }
  return seeds;
}
