// cuda_ipc's control plane without a GPU: two domain states in one process
// talking over their real Unix sockets — authenticated hellos, notifications,
// messages matched to receives (early ones queued, long ones truncated), VMM
// fd requests answered only to a caller quoting the region's seal, region
// releases, and a peer domain going away. Links against the CUDA runtime but
// makes no call that needs a device (the op paths that do are in gpu_ipc).
#include <doctest/doctest.h>
#include <fabrix/cuda_ipc.hpp>

#include "ipc_test_domain.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <thread>

using fabrix::completion;
using fabrix::opcode;
using fabrix::status;
namespace ipc = fabrix::cuda::ipc;
namespace detail = fabrix::cuda::ipc::detail;
using ipc_test::test_domain;

namespace {

bool first_is(const std::vector<std::byte>& v, std::size_t n, std::byte b) {
  for (std::size_t i = 0; i < n; ++i)
    if (v[i] != b) return false;
  return true;
}

fabrix::local_slice host_slice(std::vector<std::byte>& v, std::size_t n) {
  fabrix::local_slice s;
  s.address = v.data();
  s.length = n;
  s.owner = 1;  // a slice of some domain (below the core's checks)
  return s;
}

}  // namespace

TEST_CASE("cuda_ipc control plane: a notification becomes a remote_write_imm completion at the target") {
  test_domain a(11), b(22);
  detail::peer_state& ab = a.connect(b);
  REQUIRE(ipc::send_packet(ab.out->fd.get(), ipc::packet_type::notify, 7, 4096) == status::ok);
  b.pump();
  const auto got = b.drain();
  REQUIRE(got.size() == 1);
  CHECK(got[0].op == opcode::remote_write_imm);
  CHECK(got[0].imm == 7);
  CHECK(got[0].bytes == 4096);
  CHECK(got[0].token == 0);
  CHECK(got[0].peer == 0);  // b has no queue pair to a (yet)
  CHECK(b.d->dropped_packets == 0);
}

TEST_CASE("cuda_ipc control plane: notifications and messages name the queue pair they arrived on") {
  test_domain a(11), b(22), c(33);
  // b's queue pairs: to a (peer id 5), to c (peer id 6), a second one to a (7).
  detail::peer_state& ba = b.connect(a, true, 5);
  detail::peer_state& bc = b.connect(c, true, 6);
  detail::peer_state& ba2 = b.connect(a, true, 7);
  detail::peer_state& ab = a.connect(b);
  detail::peer_state& cb = c.connect(b);
  detail::peer_state& ab2 = a.connect(b);  // pairs with b's second queue pair to a
  REQUIRE(ipc::send_packet(ab.out->fd.get(), ipc::packet_type::notify, 1, 8) == status::ok);
  REQUIRE(ipc::send_packet(cb.out->fd.get(), ipc::packet_type::notify, 2, 8) == status::ok);
  REQUIRE(ipc::send_packet(ab2.out->fd.get(), ipc::packet_type::notify, 3, 8) == status::ok);
  b.pump();
  auto got = b.drain();
  REQUIRE(got.size() == 3);
  for (const completion& n : got) {
    CHECK(n.op == opcode::remote_write_imm);
    CHECK(n.peer == (n.imm == 1 ? 5u : n.imm == 2 ? 6u : 7u));
  }
  // Messages: the recv's completion names the queue pair it was posted on.
  std::vector<std::byte> out(16), in(64);
  std::memset(out.data(), 3, 16);
  REQUIRE(detail::post_one(bc, fabrix::op::recv(host_slice(in, 64), 40)) == status::ok);
  REQUIRE(detail::post_one(cb, fabrix::op::send(host_slice(out, 16), 41)) == status::ok);
  REQUIRE(detail::post_one(ab, fabrix::op::send(host_slice(out, 16), 42)) == status::ok);  // before its recv
  b.pump();
  REQUIRE(detail::post_one(ba, fabrix::op::recv(host_slice(in, 64), 43)) == status::ok);
  got = b.drain();
  REQUIRE(got.size() == 2);
  CHECK(got[0].token == 40);
  CHECK(got[0].peer == 6);
  CHECK(got[0].bytes == 16);
  CHECK(got[1].token == 43);
  CHECK(got[1].peer == 5);
  (void)ba2;
}

TEST_CASE("cuda_ipc: posted receives have their own bound, apart from the op pool") {
  test_domain a(11), b(22, /*max_recvs=*/4);
  detail::peer_state& ba = b.connect(a, true, 1);
  std::vector<std::byte> in(64);
  for (int i = 0; i < 4; ++i) REQUIRE(detail::post_one(ba, fabrix::op::recv(host_slice(in, 16), i)) == status::ok);
  CHECK(detail::post_one(ba, fabrix::op::recv(host_slice(in, 16), 9)) == status::again);
  CHECK(b.d->recv_ops.in_use() == 4);
  CHECK(b.d->ops.in_use() == 0);  // the 64 places of other operations are all free
  CHECK(b.d->ops.capacity() == 64);
  // Completed (here: failed, the peer's domain gone) receives give their places back.
  detail::fail_peer(ba, "test");
  const auto got = b.drain();
  REQUIRE(got.size() == 4);
  for (const completion& c : got) {
    CHECK(c.status == status::peer_unreachable);
    CHECK(c.peer == 1);
  }
  CHECK(b.d->recv_ops.in_use() == 0);
}

TEST_CASE("cuda_ipc control plane: a connection without a valid hello is ignored") {
  test_domain a(11), b(22);
  detail::peer_state& ab = a.connect(b, /*honest_hello=*/false);
  REQUIRE(ipc::send_packet(ab.out->fd.get(), ipc::packet_type::notify, 7, 1) == status::ok);
  const std::byte msg[] = {std::byte{1}};
  REQUIRE(ipc::send_packet(ab.out->fd.get(), ipc::packet_type::message, 0, 0, msg) == status::ok);
  REQUIRE(ipc::send_packet(ab.out->fd.get(), ipc::packet_type::fd_request, 1, 0) == status::ok);
  b.pump();
  CHECK(b.drain().empty());
  CHECK(b.d->unexpected.empty());
  CHECK(b.d->dropped_packets == 4);  // the bad hello and the three packets after it
  a.pump();
  CHECK(a.d->fd_replies.empty());  // no answer to an unauthenticated fd request
}

TEST_CASE("cuda_ipc control plane: messages queue until a recv, in order; a long one is truncated") {
  test_domain a(11), b(22);
  detail::peer_state& ab = a.connect(b);
  detail::peer_state& ba = b.connect(a);
  std::vector<std::byte> out(200), in(200);
  for (std::uint32_t i = 0; i < 3; ++i) {
    std::memset(out.data(), static_cast<int>(i + 1), 10 + i);
    const auto send = fabrix::op::send(host_slice(out, 10 + i), 100 + i);
    REQUIRE(detail::post_one(ab, send) == status::ok);
  }
  const auto sent = a.drain();
  REQUIRE(sent.size() == 3);
  CHECK(sent[2].op == opcode::send);
  CHECK(sent[2].token == 102);
  b.pump();
  CHECK(b.d->unexpected.size() == 3);  // nobody asked yet
  for (std::uint32_t i = 0; i < 3; ++i) {
    std::memset(in.data(), 0, in.size());
    REQUIRE(detail::post_one(ba, fabrix::op::recv(host_slice(in, 200), 200 + i)) == status::ok);
    const auto got = b.drain();
    REQUIRE(got.size() == 1);
    CHECK(got[0].op == opcode::recv);
    CHECK(got[0].token == 200 + i);
    CHECK(got[0].status == status::ok);
    CHECK(got[0].bytes == 10 + i);
    CHECK(in[0] == std::byte(i + 1));
    CHECK(in[9 + i] == std::byte(i + 1));
    CHECK(in[10 + i] == std::byte{0});
  }
  // A recv posted first completes when the message arrives; 50 bytes into 20.
  REQUIRE(detail::post_one(ba, fabrix::op::recv(host_slice(in, 20), 300)) == status::ok);
  CHECK(b.drain().empty());
  std::memset(out.data(), 9, 50);
  REQUIRE(detail::post_one(ab, fabrix::op::send(host_slice(out, 50), 301)) == status::ok);
  b.pump();
  const auto got = b.drain();
  REQUIRE(got.size() == 1);
  CHECK(got[0].status == status::truncated);
  CHECK(got[0].bytes == 20);  // the buffer's length; it holds the message's first 20 bytes
  CHECK(first_is(in, 20, std::byte{9}));
  CHECK(in[20] == std::byte{0});
  CHECK(b.d->ops.in_use() == 0);
  CHECK(b.d->recv_ops.in_use() == 0);
  // Over 64 KiB is refused at post time.
  std::vector<std::byte> big(ipc::max_message + 1);
  CHECK(detail::post_one(ab, fabrix::op::send(host_slice(big, big.size()), 302)) == status::invalid_argument);
}

TEST_CASE("cuda_ipc control plane: a VMM fd is handed out only to a caller quoting the region's seal") {
  test_domain a(11), b(22);
  a.connect(b);
  b.connect(a);
  ipc::unique_fd mem(::memfd_create("fabrix-unit", MFD_CLOEXEC));
  REQUIRE(mem);
  REQUIRE(::write(mem.get(), "allocation", 10) == 10);
  b.d->exports.push_back({9, 0xfeed, std::move(mem)});

  std::atomic<bool> stop{false};
  std::thread exporter([&] {  // b serves its sockets, as its poll() would
    while (!stop) detail::serve_links(*b.d, 5);
  });
  a.d->fetch_proof = 0xfeed;
  auto fd = detail::fetch_fd(a.d.get(), 22, 9);
  a.d->fetch_proof = 0xbad;
  auto refused = detail::fetch_fd(a.d.get(), 22, 9);
  a.d->fetch_proof = 0xfeed;
  auto unknown = detail::fetch_fd(a.d.get(), 22, 10);
  auto no_peer = detail::fetch_fd(a.d.get(), 33, 9);
  stop = true;
  exporter.join();

  REQUIRE(fd.has_value());
  char back[16] = {};
  CHECK(::pread(fd->get(), back, sizeof(back), 0) == 10);
  CHECK(std::memcmp(back, "allocation", 10) == 0);
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.code() == status::invalid_argument);
  REQUIRE_FALSE(unknown.has_value());
  CHECK(unknown.code() == status::invalid_argument);
  REQUIRE_FALSE(no_peer.has_value());
  CHECK(no_peer.code() == status::peer_unreachable);
}

TEST_CASE("cuda_ipc control plane: a release drops that region's mapping entry, and only that one") {
  test_domain a(11), b(22);
  detail::peer_state& ab = a.connect(b);
  detail::peer_state& ba = b.connect(a);
  fabrix::remote_buffer region[2];
  for (std::uint64_t epoch : {3, 4}) {
    fabrix::remote_buffer& rb = region[epoch - 3];
    rb.owner = 22;
    rb.epoch = epoch;
    ab.regions.add(rb, reinterpret_cast<std::byte*>(0x1000 * epoch));
  }
  REQUIRE(ipc::send_packet(ba.out->fd.get(), ipc::packet_type::release, 3, 0) == status::ok);
  a.pump();
  REQUIRE(ab.regions.size() == 1);
  CHECK(ab.regions.find(region[0]) == nullptr);
  REQUIRE(ab.regions.find(region[1]) != nullptr);
  CHECK(ab.regions.find(region[1])->key == reinterpret_cast<std::byte*>(0x4000));
}

TEST_CASE("cuda_ipc control plane: the peer's domain going away fails the endpoint") {
  test_domain a(11);
  auto b = std::make_unique<test_domain>(22);
  detail::peer_state& ab = a.connect(*b);
  b->connect(a);
  b->pump();  // accepts a's connection
  std::vector<std::byte> in(64), out(8);
  REQUIRE(detail::post_one(ab, fabrix::op::recv(host_slice(in, 64), 1)) == status::ok);
  b.reset();  // every socket of b closes
  a.pump();
  CHECK(ab.failed);
  const auto got = a.drain();
  REQUIRE(got.size() == 1);
  CHECK(got[0].token == 1);
  CHECK(got[0].status == status::peer_unreachable);
  CHECK(detail::post_one(ab, fabrix::op::send(host_slice(out, 8), 2)) == status::peer_unreachable);
  CHECK(detail::fetch_fd(a.d.get(), 22, 1).code() == status::peer_unreachable);
}

TEST_CASE("cuda_ipc control plane: messages that arrived before the peer went away can still be received") {
  test_domain a(11);
  auto b = std::make_unique<test_domain>(22);
  detail::peer_state& ab = a.connect(*b);
  detail::peer_state& ba = b->connect(a);
  b->pump();  // accepts a's connection
  std::vector<std::byte> in(64), out(64);
  for (std::uint32_t i = 0; i < 2; ++i) {
    std::memset(out.data(), static_cast<int>(i + 1), 8);
    REQUIRE(detail::post_one(ba, fabrix::op::send(host_slice(out, 8), i)) == status::ok);
  }
  b.reset();  // b sent, then its sockets closed: the messages are read, then the close
  a.pump();
  CHECK(ab.failed);
  for (std::uint32_t i = 0; i < 2; ++i) {
    std::memset(in.data(), 0, in.size());
    REQUIRE(detail::post_one(ab, fabrix::op::recv(host_slice(in, 64), 10 + i)) == status::ok);
    const auto got = a.drain();
    REQUIRE(got.size() == 1);
    CHECK(got[0].token == 10 + i);
    CHECK(got[0].status == status::ok);
    CHECK(got[0].bytes == 8);
    CHECK(first_is(in, 8, std::byte(i + 1)));
  }
  // None left: the next recv is refused at once, and nothing waits in the pool.
  CHECK(detail::post_one(ab, fabrix::op::recv(host_slice(in, 64), 12)) == status::peer_unreachable);
  CHECK(a.d->recv_ops.in_use() == 0);
}
