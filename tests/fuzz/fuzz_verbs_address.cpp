// The verbs provider's decoders of peer bytes: the address blob given to
// connect() (accepted blobs re-encode identically) and the handshake hello
// datagram (accepted hellos re-encode identically) and the private data of
// an rdma_cm connect request (accepted ones re-encode to its first 28 bytes).
#include "fuzz.hpp"

#include <fabrix/verbs.hpp>

#include <cstring>

namespace vd = fabrix::verbs::detail;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);
  if (auto a = vd::parse_address(in)) {
    const auto again = vd::encode_address(*a);
    FUZZ_ASSERT(again.size() == size && std::memcmp(again.data(), data, size) == 0);
  } else {
    FUZZ_ASSERT(a.code() == fabrix::status::invalid_argument);
  }
  if (auto h = vd::parse_hello(in)) {
    std::byte again[vd::hello_size];
    vd::encode_hello(*h, again);
    FUZZ_ASSERT(size == vd::hello_size && std::memcmp(again, data, size) == 0);
  }
  if (auto q = vd::parse_cm_request(in)) {
    std::byte again[vd::cm_request_size];
    vd::encode_cm_request(*q, again);
    FUZZ_ASSERT(size >= vd::cm_request_size && std::memcmp(again, data, vd::cm_request_size) == 0);
  }
  return 0;
}

std::vector<fuzz_input> fabrix_fuzz_seeds() {
  vd::peer_address a;
  a.link_layer = 2;
  a.mtu = 3;
  a.nonce = 42;
  a.ud_qpn = 17;
  const auto blob = vd::encode_address(a);
  std::byte h[vd::hello_size];
  vd::encode_hello(vd::hello{true, false, 1, 2, 3, 4, 5}, h);
  const auto* hp = reinterpret_cast<const std::uint8_t*>(h);
  a.connect = 1;
  a.cm_family = 4;
  a.cm_port = 4791;
  a.cm_ip = {10, 77, 0, 1};
  const auto cm_blob = vd::encode_address(a);
  std::byte q[vd::cm_request_size];
  vd::encode_cm_request(vd::cm_request{1, 2, 3}, q);
  const auto* qp = reinterpret_cast<const std::uint8_t*>(q);
  return {fuzz_input(reinterpret_cast<const std::uint8_t*>(blob.data()),
                     reinterpret_cast<const std::uint8_t*>(blob.data()) + blob.size()),
          fuzz_input(reinterpret_cast<const std::uint8_t*>(cm_blob.data()),
                     reinterpret_cast<const std::uint8_t*>(cm_blob.data()) + cm_blob.size()),
          fuzz_input(hp, hp + sizeof(h)), fuzz_input(qp, qp + sizeof(q))};
}
