// cuda_ipc's decoders of peer bytes: the handle in a remote_buffer's key,
// the address blob and the socket packets. Round trips, and every way a
// malformed input is refused.
#include <doctest/doctest.h>
#include <fabrix/cuda/ipc/detail/address.hpp>
#include <fabrix/cuda/ipc/detail/handle.hpp>
#include <fabrix/cuda/ipc/detail/wire.hpp>

#include <cstring>

using fabrix::status;
namespace ipc = fabrix::cuda::ipc;

namespace {

ipc::ipc_handle legacy_handle() {
  ipc::ipc_handle h;
  h.kind = ipc::handle_kind::legacy;
  h.device = 3;
  h.buffer_id = 0x1122334455667788ull;
  h.allocation_size = 1 << 20;
  h.offset = 4096;
  h.handle_size = ipc::legacy_handle_size;
  for (std::size_t i = 0; i < h.handle_size; ++i) h.handle[i] = static_cast<std::byte>(i * 3 + 1);
  return h;
}

std::span<const std::byte> key_of(const fabrix::remote_buffer& rb) { return rb.key_bytes(); }

}  // namespace

TEST_CASE("cuda_ipc handle: legacy and vmm keys round-trip through a remote_buffer encoding") {
  for (const ipc::ipc_handle& h : {legacy_handle(), ipc::make_vmm_handle(1, 77, 2 << 20, 512, 42)}) {
    fabrix::remote_buffer rb;
    rb.provider = fabrix::provider_id::cuda_ipc;
    rb.location = {fabrix::memory_kind::cuda_device, h.device};
    rb.address = 0x7f0000001000ull;
    rb.length = 1000;
    ipc::encode_handle(h, rb);
    CHECK(rb.key_size == h.encoded_size());
    auto again = fabrix::remote_buffer::decode(rb.encode());
    REQUIRE(again.has_value());
    auto d = ipc::decode_handle(key_of(*again), again->length);
    REQUIRE(d.has_value());
    CHECK(d->kind == h.kind);
    CHECK(d->device == h.device);
    CHECK(d->buffer_id == h.buffer_id);
    CHECK(d->allocation_size == h.allocation_size);
    CHECK(d->offset == h.offset);
    CHECK(d->handle_size == h.handle_size);
    CHECK(std::memcmp(d->handle.data(), h.handle.data(), h.handle_size) == 0);
  }
  CHECK(ipc::make_vmm_handle(1, 77, 2 << 20, 512, 42).export_id() == 42);
}

TEST_CASE("cuda_ipc handle: malformed keys are refused") {
  fabrix::remote_buffer rb;
  ipc::encode_handle(legacy_handle(), rb);
  const std::vector<std::byte> good(rb.key.begin(), rb.key.begin() + rb.key_size);
  auto refused = [](std::vector<std::byte> k, std::uint64_t len = 100) {
    auto r = ipc::decode_handle(k, len);
    return !r.has_value() && r.code() == status::invalid_argument;
  };
  CHECK(ipc::decode_handle(good, 100).has_value());
  for (std::size_t n = 0; n < good.size(); ++n)  // every truncation
    CHECK(refused(std::vector<std::byte>(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n))));
  auto longer = good;
  longer.push_back(std::byte{0});
  CHECK(refused(longer));
  auto magic = good;
  magic[0] = std::byte{'X'};
  CHECK(refused(magic));
  auto version = good;
  version[4] = std::byte{2};
  CHECK(refused(version));
  auto kind = good;
  kind[5] = std::byte{9};
  CHECK(refused(kind));
  auto vmm_size = good;
  vmm_size[5] = std::byte{2};  // vmm kind with a 64-byte handle
  CHECK(refused(vmm_size));
  // The region must fit in its allocation: offset 4096 + length within 1 MiB.
  CHECK(ipc::decode_handle(good, (1 << 20) - 4096).has_value());
  CHECK(refused(good, (1 << 20) - 4095));
  CHECK(refused(good, ~std::uint64_t{0}));
}

TEST_CASE("cuda_ipc address blob: round trip, and malformed blobs refused") {
  ipc::peer_address a;
  a.nonce = 0xabcdef;
  a.node = ipc::node_id();
  a.pid = 4242;
  a.process = 0x1234567890abcdefull;
  a.device = 2;
  for (std::size_t i = 0; i < a.secret.size(); ++i) a.secret[i] = static_cast<std::uint8_t>(i + 9);
  a.socket = "fabrix-cuda-ipc-4242-00000000000abcdef";
  a.host = "gpu-node-7";
  const auto blob = ipc::encode_address(a);
  auto p = ipc::parse_address(blob);
  REQUIRE(p.has_value());
  CHECK(p->nonce == a.nonce);
  CHECK(p->node == a.node);
  CHECK(p->pid == a.pid);
  CHECK(p->process == a.process);
  CHECK(p->device == a.device);
  CHECK(p->secret == a.secret);
  CHECK(p->socket == a.socket);
  CHECK(p->host == a.host);
  CHECK(ipc::encode_address(*p) == blob);
  for (std::size_t n = 0; n < blob.size(); ++n)
    CHECK_FALSE(ipc::parse_address(std::span<const std::byte>(blob.data(), n)).has_value());
  auto longer = blob;
  longer.push_back(std::byte{0});
  CHECK_FALSE(ipc::parse_address(longer).has_value());
  auto version = blob;
  version[4] = std::byte{7};
  CHECK_FALSE(ipc::parse_address(version).has_value());
  a.socket.clear();  // an empty socket name is no address
  CHECK_FALSE(ipc::parse_address(ipc::encode_address(a)).has_value());
  a.socket = std::string(300, 'x');
  CHECK(ipc::encode_address(a).empty());
}

TEST_CASE("cuda_ipc node id: stable within a machine") { CHECK(ipc::node_id() == ipc::node_id()); }

TEST_CASE("cuda_ipc packets: each type parses; malformed packets are refused") {
  std::vector<std::byte> buf(ipc::packet_header + 5);
  ipc::encode_header(std::span<std::byte, ipc::packet_header>(buf.data(), ipc::packet_header),
                     ipc::packet_type::message, 1, 2);
  std::memcpy(buf.data() + ipc::packet_header, "hello", 5);
  auto m = ipc::parse_packet(buf);
  REQUIRE(m.has_value());
  CHECK(m->type == ipc::packet_type::message);
  CHECK(m->payload.size() == 5);
  CHECK(std::memcmp(m->payload.data(), "hello", 5) == 0);

  std::vector<std::byte> hdr(ipc::packet_header);
  auto make = [&](ipc::packet_type t, std::uint64_t a, std::uint64_t b) {
    ipc::encode_header(std::span<std::byte, ipc::packet_header>(hdr.data(), ipc::packet_header), t, a, b);
    return hdr;
  };
  for (auto t :
       {ipc::packet_type::hello, ipc::packet_type::notify, ipc::packet_type::fd_request, ipc::packet_type::fd_reply,
        ipc::packet_type::release, ipc::packet_type::bell, ipc::packet_type::rings}) {
    auto p = ipc::parse_packet(make(t, 7, 8));
    REQUIRE(p.has_value());
    CHECK(p->type == t);
    CHECK(p->a == 7);
    CHECK(p->b == 8);
  }
  CHECK_FALSE(ipc::parse_packet(make(ipc::packet_type::notify, 1ull << 32, 0)).has_value());  // imm over 32 bits
  auto with_payload = make(ipc::packet_type::notify, 1, 2);
  with_payload.push_back(std::byte{1});
  CHECK_FALSE(ipc::parse_packet(with_payload).has_value());
  auto bad_type = make(ipc::packet_type::hello, 0, 0);
  bad_type[4] = std::byte{0};
  CHECK_FALSE(ipc::parse_packet(bad_type).has_value());
  bad_type[4] = std::byte{9};  // one past rings, the last type
  CHECK_FALSE(ipc::parse_packet(bad_type).has_value());
  auto padding = make(ipc::packet_type::hello, 0, 0);
  padding[6] = std::byte{1};
  CHECK_FALSE(ipc::parse_packet(padding).has_value());
  CHECK_FALSE(ipc::parse_packet(std::span<const std::byte>(hdr.data(), ipc::packet_header - 1)).has_value());
  std::vector<std::byte> huge(ipc::max_packet + 1);
  ipc::encode_header(std::span<std::byte, ipc::packet_header>(huge.data(), ipc::packet_header),
                     ipc::packet_type::message, 0, 0);
  CHECK_FALSE(ipc::parse_packet(huge).has_value());
  huge.pop_back();
  CHECK(ipc::parse_packet(huge).has_value());
}

TEST_CASE("cuda_ipc hello proof: depends on the receiver's secret and the sender's nonce") {
  fabrix::detail::seal_key a{}, b{};
  b[0] = 1;
  CHECK(ipc::hello_proof(a, 5) == ipc::hello_proof(a, 5));
  CHECK(ipc::hello_proof(a, 5) != ipc::hello_proof(b, 5));
  CHECK(ipc::hello_proof(a, 5) != ipc::hello_proof(a, 6));
}
