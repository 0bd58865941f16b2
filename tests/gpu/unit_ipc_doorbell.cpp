// cuda_ipc's doorbell without a GPU: a domain hands its bell to each peer
// that connects, the peer rings it after every packet, and poll() then reads
// the sockets only when it moved, when a link does not ring, or once per
// sweep. Forged bells and out-of-place bell packets are refused.
#include <doctest/doctest.h>
#include <fabrix/cuda_ipc.hpp>

#include "ipc_test_domain.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <chrono>

using fabrix::opcode;
using fabrix::status;
using ipc_test::test_domain;
namespace ipc = fabrix::cuda::ipc;
namespace detail = fabrix::cuda::ipc::detail;
using clk = std::chrono::steady_clock;

namespace {

detail::link* inbound_from(test_domain& t, std::uint64_t nonce) {
  for (auto& l : t.d->links)
    if (!l->outgoing && l->nonce == nonce) return l.get();
  return nullptr;
}

// a connects to b, and both serve until a rings b's bell.
void handshake(test_domain& a, test_domain& b, detail::peer_state& ab) {
  b.pump(2);  // accepts, then reads the hello and answers with the bell
  a.pump(1);  // maps it, says `rings`
  b.pump(1);
  REQUIRE(ab.out->peer_bell);
  detail::link* in = inbound_from(b, a.d->nonce);
  REQUIRE(in != nullptr);
  REQUIRE(in->rings);
}

// Counts the polls, out of `n`, on which links_due says to read the sockets.
int due_in(test_domain& t, int n, bool copies_in_flight = false) {
  int due = 0;
  for (int i = 0; i < n; ++i) due += detail::links_due(*t.d, copies_in_flight) ? 1 : 0;
  return due;
}

}  // namespace

TEST_CASE("cuda_ipc doorbell: a quiet domain reads no socket; a packet's ring makes the next poll read it") {
  test_domain a(11), b(22);
  detail::peer_state& ab = a.connect(b);
  handshake(a, b, ab);
  CHECK_FALSE(b.d->serve_every_poll);
  CHECK(b.d->dropped_packets == 0);
  CHECK(a.d->dropped_packets == 0);

  b.d->next_sweep = clk::now() + std::chrono::hours(1);
  const auto reads = b.d->socket_reads;
  CHECK(due_in(b, 1000) == 0);
  CHECK(b.d->socket_reads == reads);

  REQUIRE(detail::send_on(*ab.out, ipc::packet_type::notify, 7, 8) == status::ok);
  CHECK(detail::links_due(*b.d, false));
  detail::serve_links(*b.d);
  auto got = b.drain();
  REQUIRE(got.size() == 1);
  CHECK(got[0].op == opcode::remote_write_imm);
  CHECK(got[0].imm == 7);
  b.d->next_sweep = clk::now() + std::chrono::hours(1);
  CHECK(due_in(b, 100) == 0);

  // The sweep still comes: accepts and closed connections do not ring.
  b.d->next_sweep = clk::now() - std::chrono::milliseconds(1);
  CHECK(detail::links_due(*b.d, false));
}

TEST_CASE("cuda_ipc doorbell: messages and notifications sent by the op paths ring") {
  test_domain a(11), b(22);
  detail::peer_state& ab = a.connect(b);
  handshake(a, b, ab);
  b.d->next_sweep = clk::now() + std::chrono::hours(1);
  std::vector<std::byte> out(16, std::byte{9});
  fabrix::local_slice s;
  s.address = out.data();
  s.length = out.size();
  s.owner = 1;  // a slice of some domain (below the core's checks)
  const auto before = ab.out->peer_bell.count();
  REQUIRE(detail::post_one(ab, fabrix::op::send(s, 1)) == status::ok);
  CHECK(ab.out->peer_bell.count() == before + 1);
  CHECK(b.d->bell.count() == before + 1);  // the same page, seen from both ends
  CHECK(detail::links_due(*b.d, false));
}

TEST_CASE("cuda_ipc doorbell: a link that does not ring keeps poll() reading the sockets") {
  test_domain a(11), b(22);
  detail::peer_state& ab = a.connect(b);
  b.pump(2);  // b has answered with its bell, but a has not read it yet
  CHECK_FALSE(ab.out->peer_bell);
  CHECK(b.d->serve_every_poll);
  b.d->next_sweep = clk::now() + std::chrono::hours(1);
  CHECK(due_in(b, 32) == 32);
  CHECK(due_in(b, 32, true) == 2);  // every 16th while copies run, as before the bell

  // A domain with no bell (no memfd) reads on every poll.
  test_domain c(33);
  c.d->bell = ipc::doorbell{};
  c.pump(1);
  CHECK(c.d->serve_every_poll);
  CHECK(due_in(c, 10) == 10);
}

TEST_CASE("cuda_ipc doorbell: a read that stops at its budget leaves the next poll due") {
  test_domain a(11), b(22);
  detail::peer_state& ab = a.connect(b);
  handshake(a, b, ab);
  b.d->next_sweep = clk::now() + std::chrono::hours(1);
  for (std::uint64_t i = 0; i < 100; ++i)
    REQUIRE(detail::send_on(*ab.out, ipc::packet_type::notify, i, 8) == status::ok);
  REQUIRE(detail::links_due(*b.d, false));
  detail::serve_links(*b.d);
  CHECK(b.drain().size() == 64);  // one link's budget per read
  CHECK(b.d->serve_every_poll);
  REQUIRE(detail::links_due(*b.d, false));
  detail::serve_links(*b.d);
  CHECK(b.drain().size() == 36);
  CHECK_FALSE(b.d->serve_every_poll);
}

TEST_CASE("cuda_ipc doorbell: forged or misplaced bell packets are refused") {
  test_domain a(11), b(22);
  b.d->bell = ipc::doorbell{};  // b sends no genuine bell: the forged ones below are the only ones
  detail::peer_state& ab = a.connect(b);
  b.pump(2);
  detail::link* in = inbound_from(b, a.d->nonce);
  REQUIRE(in != nullptr);

  SUBCASE("an unsealed memfd (it could shrink under the mapping) is not mapped") {
    ipc::unique_fd fd(::memfd_create("forged", MFD_CLOEXEC));
    REQUIRE(fd);
    REQUIRE(::ftruncate(fd.get(), ipc::doorbell::bytes) == 0);
    REQUIRE(ipc::send_packet(in->fd.get(), ipc::packet_type::bell, 0, 0, {}, fd.get()) == status::ok);
    a.pump(1);
    CHECK_FALSE(ab.out->peer_bell);
    b.pump(1);
    CHECK_FALSE(in->rings);  // no `rings` came back
  }
  SUBCASE("a sealed memfd smaller than a bell is not mapped") {
    ipc::unique_fd fd(::memfd_create("forged", MFD_CLOEXEC | MFD_ALLOW_SEALING));
    REQUIRE(fd);
    REQUIRE(::ftruncate(fd.get(), 8) == 0);
    REQUIRE(::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0);
    REQUIRE(ipc::send_packet(in->fd.get(), ipc::packet_type::bell, 0, 0, {}, fd.get()) == status::ok);
    a.pump(1);
    CHECK_FALSE(ab.out->peer_bell);
  }
  SUBCASE("a bell without an fd, or on an inbound link, is dropped") {
    REQUIRE(ipc::send_packet(in->fd.get(), ipc::packet_type::bell, 0, 0) == status::ok);
    a.pump(1);
    CHECK_FALSE(ab.out->peer_bell);
    CHECK(a.d->dropped_packets == 1);
    auto genuine = ipc::doorbell::create();
    REQUIRE(genuine);
    REQUIRE(ipc::send_packet(ab.out->fd.get(), ipc::packet_type::bell, 0, 0, {}, genuine.fd()) == status::ok);
    b.pump(1);
    CHECK(b.d->dropped_packets == 1);
  }
  SUBCASE("`rings` on our own connection, or before a hello, is dropped") {
    REQUIRE(ipc::send_packet(in->fd.get(), ipc::packet_type::rings, 0, 0) == status::ok);
    a.pump(1);
    CHECK(a.d->dropped_packets == 1);
    test_domain c(33);
    auto raw = ipc::connect_abstract(b.d->socket_name);  // no hello
    REQUIRE(raw.has_value());
    REQUIRE(ipc::send_packet(raw->get(), ipc::packet_type::rings, 0, 0) == status::ok);
    b.pump(2);
    CHECK(b.d->dropped_packets == 1);
    CHECK(b.d->serve_every_poll);  // that link still does not ring
  }
}
