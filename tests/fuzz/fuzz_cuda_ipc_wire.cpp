// cuda_ipc's decoders of peer bytes (they need no CUDA): the address blob
// given to connect(), the key bytes of a remote_buffer (the IPC handle) and
// the packets read from a peer's socket. Accepted inputs re-encode
// identically; refusals are invalid_argument.
#include "fuzz.hpp"

#include <fabrix/cuda/ipc/detail/address.hpp>
#include <fabrix/cuda/ipc/detail/handle.hpp>
#include <fabrix/cuda/ipc/detail/wire.hpp>

#include <cstring>

namespace ipc = fabrix::cuda::ipc;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);
  if (auto a = ipc::parse_address(in)) {
    FUZZ_ASSERT(!a->socket.empty());
    const auto again = ipc::encode_address(*a);
    FUZZ_ASSERT(again.size() == size && std::memcmp(again.data(), data, size) == 0);
  } else {
    FUZZ_ASSERT(a.code() == fabrix::status::invalid_argument);
  }
  // The region length comes from the (sealed) remote_buffer; try a few.
  for (std::uint64_t length : {std::uint64_t{1}, std::uint64_t{4096}, ~std::uint64_t{0}}) {
    if (size > fabrix::remote_buffer::max_key_size) break;
    if (auto h = ipc::decode_handle(in, length)) {
      FUZZ_ASSERT(h->offset <= h->allocation_size && length <= h->allocation_size - h->offset);
      fabrix::remote_buffer rb;
      ipc::encode_handle(*h, rb);
      FUZZ_ASSERT(rb.key_size == size && std::memcmp(rb.key.data(), data, size) == 0);
    } else {
      FUZZ_ASSERT(h.code() == fabrix::status::invalid_argument);
    }
  }
  if (auto p = ipc::parse_packet(in)) {
    FUZZ_ASSERT(p->payload.size() == size - ipc::packet_header);
    FUZZ_ASSERT(p->payload.empty() || p->type == ipc::packet_type::message);
    std::byte header[ipc::packet_header];
    ipc::encode_header(std::span<std::byte, ipc::packet_header>(header), p->type, p->a, p->b);
    FUZZ_ASSERT(std::memcmp(header, data, ipc::packet_header) == 0);
  } else {
    FUZZ_ASSERT(p.code() == fabrix::status::invalid_argument);
  }
  return 0;
}

std::vector<fuzz_input> fabrix_fuzz_seeds() {
  auto bytes = [](const std::byte* p, std::size_t n) {
    const auto* u = reinterpret_cast<const std::uint8_t*>(p);
    return fuzz_input(u, u + n);
  };
  ipc::peer_address a{7, 8, 9, 10, 1, {}, "fabrix-cuda-ipc-9-0000000000000007", "node"};
  const auto blob = ipc::encode_address(a);
  fabrix::remote_buffer legacy, vmm;
  ipc::ipc_handle h;
  h.allocation_size = 1 << 20;
  h.handle_size = ipc::legacy_handle_size;
  ipc::encode_handle(h, legacy);
  ipc::encode_handle(ipc::make_vmm_handle(0, 5, 2 << 20, 4096, 3), vmm);
  std::byte packet[ipc::packet_header + 4] = {};
  ipc::encode_header(std::span<std::byte, ipc::packet_header>(packet, ipc::packet_header), ipc::packet_type::message, 0,
                     0);
  std::byte notify[ipc::packet_header];
  ipc::encode_header(std::span<std::byte, ipc::packet_header>(notify), ipc::packet_type::notify, 42, 4096);
  return {bytes(blob.data(), blob.size()), bytes(legacy.key.data(), legacy.key_size),
          bytes(vmm.key.data(), vmm.key_size), bytes(packet, sizeof(packet)), bytes(notify, sizeof(notify))};
}
