// The Unix SEQPACKET transport of cuda_ipc: packets keep their boundaries,
// a file descriptor travels with SCM_RIGHTS (the VMM export path), a closed
// peer is seen as closed, an oversized packet is reported truncated.
#include <doctest/doctest.h>
#include <fabrix/cuda/ipc/detail/socket.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

using fabrix::status;
namespace ipc = fabrix::cuda::ipc;

namespace {
std::string unique_name(const char* what) {
  return std::string("fabrix-test-") + what + "-" + std::to_string(::getpid());
}

ipc::unique_fd accept_one(int listener) {
  for (int i = 0; i < 1000; ++i) {
    const int fd = ::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) return ipc::unique_fd(fd);
    ::usleep(1000);
  }
  return {};
}
}  // namespace

TEST_CASE("cuda_ipc socket: packets, an fd over SCM_RIGHTS, and the peer closing") {
  const std::string name = unique_name("fd");
  auto listener = ipc::listen_abstract(name);
  REQUIRE(listener.has_value());
  auto client = ipc::connect_abstract(name);
  REQUIRE(client.has_value());
  ipc::unique_fd server = accept_one(listener->get());
  REQUIRE(server);

  // A memfd stands in for a VMM allocation's fd: the receiver sees the same file.
  ipc::unique_fd mem(::memfd_create("fabrix-test", MFD_CLOEXEC));
  REQUIRE(mem);
  REQUIRE(::write(mem.get(), "gpu bytes", 9) == 9);
  REQUIRE(ipc::send_packet(client->get(), ipc::packet_type::fd_reply, 42, 0, {}, mem.get()) == status::ok);
  const std::byte msg[] = {std::byte{1}, std::byte{2}, std::byte{3}};
  REQUIRE(ipc::send_packet(client->get(), ipc::packet_type::message, 0, 0, msg) == status::ok);

  std::vector<std::byte> buf(ipc::max_packet);
  REQUIRE(ipc::wait_readable(server.get(), 1000));
  ipc::received r = ipc::receive_packet(server.get(), buf);
  REQUIRE(r.kind == ipc::received::packet_ready);
  auto p = ipc::parse_packet(std::span<const std::byte>(buf.data(), r.size));
  REQUIRE(p.has_value());
  CHECK(p->type == ipc::packet_type::fd_reply);
  CHECK(p->a == 42);
  REQUIRE(r.fd);
  CHECK(r.fd.get() != mem.get());
  char back[16] = {};
  CHECK(::pread(r.fd.get(), back, sizeof(back), 0) == 9);
  CHECK(std::memcmp(back, "gpu bytes", 9) == 0);

  r = ipc::receive_packet(server.get(), buf);
  REQUIRE(r.kind == ipc::received::packet_ready);
  CHECK_FALSE(r.fd);
  p = ipc::parse_packet(std::span<const std::byte>(buf.data(), r.size));
  REQUIRE(p.has_value());
  CHECK(p->type == ipc::packet_type::message);
  REQUIRE(p->payload.size() == 3);
  CHECK(p->payload[2] == std::byte{3});

  CHECK(ipc::receive_packet(server.get(), buf).kind == ipc::received::nothing);
  client->reset();
  REQUIRE(ipc::wait_readable(server.get(), 1000));
  CHECK(ipc::receive_packet(server.get(), buf).kind == ipc::received::closed);
  // Sending to a closed peer is peer_unreachable, not SIGPIPE.
  CHECK(ipc::send_packet(server.get(), ipc::packet_type::hello, 1, 0) == status::peer_unreachable);
}

TEST_CASE("cuda_ipc socket: a packet longer than the buffer is reported truncated") {
  const std::string name = unique_name("trunc");
  auto listener = ipc::listen_abstract(name);
  REQUIRE(listener.has_value());
  auto client = ipc::connect_abstract(name);
  REQUIRE(client.has_value());
  ipc::unique_fd server = accept_one(listener->get());
  REQUIRE(server);
  std::vector<std::byte> payload(1000, std::byte{7});
  REQUIRE(ipc::send_packet(client->get(), ipc::packet_type::message, 0, 0, payload) == status::ok);
  std::vector<std::byte> small(100);
  REQUIRE(ipc::wait_readable(server.get(), 1000));
  const ipc::received r = ipc::receive_packet(server.get(), small);
  REQUIRE(r.kind == ipc::received::packet_ready);
  CHECK(r.truncated);
}

TEST_CASE("cuda_ipc socket: connecting to a name nobody listens on is peer_unreachable") {
  auto c = ipc::connect_abstract(unique_name("nobody"));
  REQUIRE_FALSE(c.has_value());
  CHECK(c.code() == status::peer_unreachable);
}

TEST_CASE("cuda_ipc socket: the same name cannot be bound twice") {
  const std::string name = unique_name("twice");
  auto a = ipc::listen_abstract(name);
  REQUIRE(a.has_value());
  CHECK_FALSE(ipc::listen_abstract(name).has_value());
}
