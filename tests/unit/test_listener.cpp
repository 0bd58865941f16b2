// fabrix::listener / dial_hello (listener.hpp) on the loopback interface:
// the handshake carries both sides' address blobs and offers and gives
// peer ids 1, 2, ...; a wrong token is refused on both sides without
// either learning the other's hello; malformed, oversized, truncated and
// silent clients are dropped (counted) while accept() goes on to the next
// client; a forged answer is refused by the client; nothing listening is
// peer_unreachable. Clients run on threads of the test.
#include <doctest/doctest.h>
#include <fabrix/listener.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;

std::vector<std::byte> bytes(std::string_view s) {
  return std::vector<std::byte>(reinterpret_cast<const std::byte*>(s.data()),
                                reinterpret_cast<const std::byte*>(s.data()) + s.size());
}

std::uint16_t port_of(const std::string& address) {
  return static_cast<std::uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)));
}

// A raw TCP connection to 127.0.0.1:port (blocking).
int raw_connect(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  return fd;
}

fabrix::result<fabrix::peer_hello> dial(const std::string& where, std::string_view token, std::string_view address,
                                        std::string_view offer = "") {
  const auto a = bytes(address), o = bytes(offer);
  return fabrix::dial_hello(where, token, a, o, 3000ms);
}

}  // namespace

TEST_CASE("listener: the handshake carries both hellos and numbers the clients") {
  auto l = fabrix::listener::open("127.0.0.1:0", "secret").value();
  const std::string where = l.address();
  const auto server_address = bytes("server-blob"), server_offer = bytes("server-offer");
  for (std::uint32_t id = 1; id <= 3; ++id) {
    const std::string mine = "client-blob-" + std::to_string(id);
    auto client = std::async(std::launch::async, [&] { return dial(where, "secret", mine, "client-offer"); });
    auto got = l.accept_hello(server_address, server_offer, 3000ms);
    auto answer = client.get();
    REQUIRE(got.has_value());
    REQUIRE(answer.has_value());
    CHECK(got->address == bytes(mine));
    CHECK(got->offer == bytes("client-offer"));
    CHECK(got->peer_id == id);
    CHECK(answer->address == server_address);
    CHECK(answer->offer == server_offer);
    CHECK(answer->peer_id == id);
    CHECK(got->from.find("127.0.0.1:") == 0);
  }
  CHECK(l.refused() == 0);
}

TEST_CASE("listener: a wrong token is refused on both sides") {
  auto l = fabrix::listener::open("127.0.0.1:0", "secret").value();
  const std::string where = l.address();
  auto client = std::async(std::launch::async, [&] { return dial(where, "guess", "blob"); });
  auto got = l.accept_hello(bytes("server"), {}, 500ms);
  auto answer = client.get();
  REQUIRE(!answer.has_value());
  CHECK(answer.error().code == fabrix::status::access_denied);
  REQUIRE(!got.has_value());
  CHECK(got.error().code == fabrix::status::timed_out);  // the bad client was dropped, none came after
  CHECK(l.refused() == 1);
  // The listener goes on: the next client with the token gets id 1.
  auto good = std::async(std::launch::async, [&] { return dial(where, "secret", "blob"); });
  auto next = l.accept_hello(bytes("server"), {}, 3000ms);
  REQUIRE(next.has_value());
  CHECK(next->peer_id == 1);
  CHECK(good.get().has_value());
}

TEST_CASE("listener: malformed, oversized, truncated and silent clients are dropped; the next one is served") {
  fabrix::listener::options o;
  o.handshake_timeout = 200ms;
  auto l = fabrix::listener::open("127.0.0.1:0", "secret", o).value();
  const std::string where = l.address();
  const std::uint16_t port = port_of(where);
  std::vector<int> fds;
  // Not a fabrix client.
  fds.push_back(raw_connect(port));
  CHECK(::write(fds.back(), "GET / HTTP/1.0\r\n\r\n", 18) == 18);
  // A client hello claiming a 1 GiB address: refused before anything is read or allocated.
  {
    fds.push_back(raw_connect(port));
    std::byte h[4 + 16 + 8]{};
    std::memcpy(h, "FXC1", 4);
    const std::uint32_t big = 1u << 30, none = 0;
    std::memcpy(h + 20, &big, 4);
    std::memcpy(h + 24, &none, 4);
    CHECK(::write(fds.back(), h, sizeof h) == static_cast<ssize_t>(sizeof h));
  }
  // A hello cut short, then silence.
  fds.push_back(raw_connect(port));
  CHECK(::write(fds.back(), "FXC1abc", 7) == 7);
  // Silence from the start.
  fds.push_back(raw_connect(port));
  auto good = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(50ms);  // behind the four above in the backlog
    return dial(where, "secret", "good-blob");
  });
  auto got = l.accept_hello(bytes("server"), {}, 5000ms);
  REQUIRE(got.has_value());
  CHECK(got->address == bytes("good-blob"));
  CHECK(l.refused() == 4);
  CHECK(good.get().has_value());
  for (int fd : fds) ::close(fd);
}

TEST_CASE("listener: a client refuses a forged answer, a non-listener and an empty port") {
  // A fake listener: greets, reads the client's hello, answers with a MAC it cannot make.
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(s, 4) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  const std::string where = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  auto fake = std::async(
      std::launch::async,
      [&](bool forge) {
        const int c = ::accept(s, nullptr, nullptr);
        std::byte greet[20]{};
        std::memcpy(greet, forge ? "FXL1" : "SSH-", 4);
        CHECK(::write(c, greet, sizeof greet) == 20);
        if (forge) {
          std::byte hello[4 + 16 + 8 + 4 + 32];  // the client's hello for a 4-byte blob, no offer
          std::size_t got = 0;
          while (got < sizeof hello) {
            const ssize_t n = ::read(c, hello + got, sizeof hello - got);
            if (n <= 0) break;
            got += static_cast<std::size_t>(n);
          }
          std::byte answer[4 + 4 + 8 + 3 + 32]{};
          std::memcpy(answer, "FXA1", 4);
          const std::uint32_t id = 7, alen = 3, olen = 0;
          std::memcpy(answer + 4, &id, 4);
          std::memcpy(answer + 8, &alen, 4);
          std::memcpy(answer + 12, &olen, 4);
          CHECK(::write(c, answer, sizeof answer) == static_cast<ssize_t>(sizeof answer));
        }
        std::this_thread::sleep_for(100ms);
        ::close(c);
      },
      true);
  auto r = dial(where, "secret", "blob");
  fake.get();
  REQUIRE(!r.has_value());
  CHECK(r.error().code == fabrix::status::access_denied);
  auto other = std::async(std::launch::async, [&] {
    const int c = ::accept(s, nullptr, nullptr);
    CHECK(::write(c, "SSH-2.0-OpenSSH_9.2\r\n", 21) == 21);
    std::this_thread::sleep_for(100ms);
    ::close(c);
  });
  r = dial(where, "secret", "blob");
  other.get();
  REQUIRE(!r.has_value());
  CHECK(r.error().code == fabrix::status::invalid_argument);
  ::close(s);
  // Nothing listens there now.
  r = dial(where, "secret", "blob");
  REQUIRE(!r.has_value());
  CHECK(r.error().code == fabrix::status::peer_unreachable);
  // Bad input on either side.
  CHECK(fabrix::listener::open("127.0.0.1:0", "").error().code == fabrix::status::invalid_argument);
  CHECK(fabrix::listener::open("no port here", "t").error().code == fabrix::status::invalid_argument);
  CHECK(dial(where, "", "blob").error().code == fabrix::status::invalid_argument);
  CHECK(dial(where, "t", "").error().code == fabrix::status::invalid_argument);
}
