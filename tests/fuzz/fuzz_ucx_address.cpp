// The UCX provider's decoders of peer bytes: the address blob given to
// connect() (accepted blobs re-encode identically) and the notification
// active-message header (anything malformed is counted and dropped).
#include "fuzz.hpp"

#include <fabrix/ucx.hpp>

#include <cstring>

namespace ud = fabrix::ucx::detail;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);
  if (auto a = ud::parse_address(in)) {
    FUZZ_ASSERT(!a->native.empty());
    const auto again = ud::encode_address(*a);
    FUZZ_ASSERT(again.size() == size && std::memcmp(again.data(), data, size) == 0);
  } else {
    FUZZ_ASSERT(a.code() == fabrix::status::invalid_argument);
  }
  static ud::domain_state d(16);
  const auto dropped = d.dropped_notifications;
  FUZZ_ASSERT(ud::on_notify(&d, data, size, nullptr, 0, nullptr) == UCS_OK);
  fabrix::completion c[2];
  const std::size_t n = d.ring.drain(c);
  FUZZ_ASSERT(n + (d.dropped_notifications - dropped) == 1);
  if (n == 1) FUZZ_ASSERT(size == sizeof(ud::notify_header) && c[0].op == fabrix::opcode::remote_write_imm);
  return 0;
}

std::vector<fuzz_input> fabrix_fuzz_seeds() {
  std::vector<std::byte> worker(40, std::byte{7});
  ud::peer_address a{42, {1, 2, 3}, {}, worker};
  const auto blob = ud::encode_address(a);
  ud::notify_header h{};
  h.imm = 5;
  h.bytes = 100;
  const auto* hp = reinterpret_cast<const std::uint8_t*>(&h);
  return {fuzz_input(reinterpret_cast<const std::uint8_t*>(blob.data()),
                     reinterpret_cast<const std::uint8_t*>(blob.data()) + blob.size()),
          fuzz_input(hp, hp + sizeof(h))};
}
