// fabrix::listener and dial_hello (include/fabrix/listener.hpp): the
// handshake that lets a peer join without a job-wide bootstrap.
//
// Wire (little-endian), one TCP connection:
//   listener -> client: "FXL1" nonce[16]
//   client -> listener: "FXC1" nonce[16] u32 address_len u32 offer_len
//                       address offer mac[32]
//     mac = HMAC(token, "fabrix-listen client" | listener nonce | header | address | offer)
//   listener -> client: "FXA1" u32 peer_id u32 address_len u32 offer_len
//                       address offer mac[32]
//     mac = HMAC(token, "fabrix-listen listener" | client nonce | listener nonce | header | address | offer)
// where header is the message's bytes from its magic up to the payload. A
// client whose MAC fails is closed without an answer.
#include "address.hpp"
#include "hmac.hpp"
#include "socket.hpp"

#include <fabrix/detail/little_endian.hpp>
#include <fabrix/listener.hpp>

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace fabrix {

namespace {

namespace boot = detail::boot;
using boot::deadline;
using boot::io_result;
using boot::io_status;

constexpr std::size_t nonce_bytes = 16;
constexpr char listener_magic[4] = {'F', 'X', 'L', '1'};
constexpr char client_magic[4] = {'F', 'X', 'C', '1'};
constexpr char answer_magic[4] = {'F', 'X', 'A', '1'};

using nonce = std::array<std::byte, nonce_bytes>;

std::span<const std::byte> bytes_of(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// Reads exactly out.size() bytes before `until`.
io_result recv_exact(int fd, std::span<std::byte> out, const deadline& until) {
  std::size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = ::recv(fd, out.data() + got, out.size() - got, 0);
    if (n > 0) {
      got += static_cast<std::size_t>(n);
      continue;
    }
    if (n == 0) return {io_status::closed, 0, {}};
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return {io_status::failed, errno, {}};
    pollfd p{fd, POLLIN, 0};
    const int r = boot::poll_until(&p, 1, until);
    if (r == 0) return {io_status::timed_out, 0, {}};
    if (r < 0 && errno != EINTR) return {io_status::failed, errno, {}};
  }
  return {};
}

io_result send_bytes(int fd, std::span<const std::byte> b, const deadline& until) {
  const std::span<const std::byte> pieces[] = {b};
  return boot::send_all(fd, pieces, until);
}

boot::digest mac_of(std::string_view token, std::string_view label, const nonce& first, const nonce* second,
                    std::span<const std::byte> message) {
  boot::hmac_sha256 h(bytes_of(token));
  h.update(label);
  h.update(first);
  if (second) h.update(*second);
  h.update(message);
  return h.finish();
}

// A hello: magic, [peer id], lengths, address, offer (the part the MAC
// covers), then the MAC.
std::vector<std::byte> encode_hello(const char (&magic)[4], const nonce* client_nonce, const std::uint32_t* peer_id,
                                    std::span<const std::byte> address, std::span<const std::byte> offer) {
  std::vector<std::byte> m(4 + (client_nonce ? nonce_bytes : 0) + (peer_id ? 4 : 0) + 8 + address.size() +
                           offer.size());
  detail::le_writer w(m.data());
  w.put_bytes(reinterpret_cast<const std::byte*>(magic), 4);
  if (client_nonce) w.put_bytes(client_nonce->data(), nonce_bytes);
  if (peer_id) w.put<std::uint32_t>(*peer_id);
  w.put<std::uint32_t>(static_cast<std::uint32_t>(address.size()));
  w.put<std::uint32_t>(static_cast<std::uint32_t>(offer.size()));
  w.put_bytes(address.data(), address.size());
  w.put_bytes(offer.data(), offer.size());
  return m;
}

// Reads the rest of a hello after its fixed header (`head`, already read):
// the lengths at the end of `head`, address, offer, MAC. Returns the
// message bytes the MAC covers (head + payload) in `message`.
result<void> read_payload(int fd, std::span<const std::byte> head, std::vector<std::byte>& message, peer_hello& out,
                          const deadline& until, const char* who) {
  const auto address_len = detail::load_le<std::uint32_t>(head.data() + head.size() - 8);
  const auto offer_len = detail::load_le<std::uint32_t>(head.data() + head.size() - 4);
  if (address_len == 0 || address_len > max_address_bytes || offer_len > max_offer_bytes)
    return unexpected(status::invalid_argument,
                      std::string(who) + " sent a hello with a " + std::to_string(address_len) +
                          "-byte address and a " + std::to_string(offer_len) + "-byte offer (at most " +
                          std::to_string(max_address_bytes) + " and " + std::to_string(max_offer_bytes) + ")",
                      "listener");
  message.assign(head.begin(), head.end());
  message.resize(head.size() + address_len + offer_len);
  if (auto io = recv_exact(fd, std::span(message).subspan(head.size()), until); !io.ok())
    return unexpected(io.status == io_status::timed_out ? status::timed_out : status::invalid_argument,
                      std::string(who) + "'s hello: " + boot::describe(io), "listener");
  out.address.assign(message.begin() + static_cast<std::ptrdiff_t>(head.size()),
                     message.begin() + static_cast<std::ptrdiff_t>(head.size() + address_len));
  out.offer.assign(message.begin() + static_cast<std::ptrdiff_t>(head.size() + address_len), message.end());
  return {};
}

status status_of(const io_result& io) {
  switch (io.status) {
    case io_status::timed_out: return status::timed_out;
    case io_status::closed: return status::peer_unreachable;
    default: return status::provider_error;
  }
}

}  // namespace

struct listener::impl {
  boot::listener sock;
  std::string token;
  options opts;
  std::uint32_t next_id = 1;
  std::uint64_t refused = 0;

  // One connected client's handshake; an error drops it.
  result<peer_hello> handshake(int fd, std::span<const std::byte> address, std::span<const std::byte> offer,
                               const deadline& until) {
    nonce mine{};
    if (!boot::random_bytes(mine)) return unexpected(status::provider_error, "no random bytes for a nonce", "listener");
    std::array<std::byte, 4 + nonce_bytes> greeting{};
    std::memcpy(greeting.data(), listener_magic, 4);
    std::memcpy(greeting.data() + 4, mine.data(), nonce_bytes);
    if (auto io = send_bytes(fd, greeting, until); !io.ok())
      return unexpected(status_of(io), "greeting: " + boot::describe(io), "listener");
    std::array<std::byte, 4 + nonce_bytes + 8> head{};
    if (auto io = recv_exact(fd, head, until); !io.ok())
      return unexpected(status_of(io), "client hello: " + boot::describe(io), "listener");
    if (std::memcmp(head.data(), client_magic, 4) != 0)
      return unexpected(status::invalid_argument, "not a fabrix client hello", "listener");
    nonce theirs{};
    std::memcpy(theirs.data(), head.data() + 4, nonce_bytes);
    peer_hello got;
    std::vector<std::byte> message;
    if (auto r = read_payload(fd, head, message, got, until, "the client"); !r) return unexpected(std::move(r).error());
    boot::digest mac{};
    if (auto io = recv_exact(fd, mac, until); !io.ok())
      return unexpected(status_of(io), "client MAC: " + boot::describe(io), "listener");
    if (!boot::digests_equal(mac, mac_of(token, "fabrix-listen client", mine, nullptr, message)))
      return unexpected(status::access_denied, "the client's hello is not MAC'd with this listener's token",
                        "listener");
    got.peer_id = next_id;
    got.from = boot::peer_name(fd);
    const auto answer = encode_hello(answer_magic, nullptr, &got.peer_id, address, offer);
    const auto answer_mac = mac_of(token, "fabrix-listen listener", theirs, &mine, answer);
    const std::span<const std::byte> pieces[] = {answer, answer_mac};
    if (auto io = boot::send_all(fd, pieces, until); !io.ok())
      return unexpected(status_of(io), "answer: " + boot::describe(io), "listener");
    ++next_id;
    return got;
  }
};

listener::listener(std::unique_ptr<impl> p) noexcept : p_(std::move(p)) {}
listener::listener(listener&&) noexcept = default;
listener& listener::operator=(listener&&) noexcept = default;
listener::~listener() = default;

result<listener> listener::open(std::string_view where, std::string_view token, options opts) {
  if (token.empty()) return unexpected(status::invalid_argument, "listener: the token is empty", "listener");
  auto hp = boot::parse_host_port(where, "listener address");
  if (!hp) return unexpected(std::move(hp).error());
  auto sock = boot::listen_on(*hp, deadline::after(std::chrono::milliseconds(0)));
  if (!sock) return unexpected(std::move(sock).error());
  auto p = std::make_unique<impl>();
  p->sock = std::move(*sock);
  p->token = std::string(token);
  p->opts = opts;
  return listener(std::move(p));
}

std::string listener::address() const { return boot::format_host_port(p_->sock.host, p_->sock.port); }
int listener::fd() const noexcept { return p_->sock.fd.get(); }
std::uint64_t listener::refused() const noexcept { return p_->refused; }

result<peer_hello> listener::accept_hello(std::span<const std::byte> address, std::span<const std::byte> offer,
                                          std::chrono::milliseconds timeout) {
  if (address.empty() || address.size() > max_address_bytes || offer.size() > max_offer_bytes)
    return unexpected(status::invalid_argument, "accept: an empty or oversized address or offer", "listener");
  const deadline until = deadline::after(timeout);
  for (;;) {
    pollfd p{fd(), POLLIN, 0};
    const int r = boot::poll_until(&p, 1, until);
    if (r == 0) return unexpected(status::timed_out, "accept: no client within the timeout", "listener");
    if (r < 0) {
      if (errno == EINTR) continue;
      return unexpected(status::provider_error, "accept: poll: " + boot::errno_text(errno), "listener");
    }
    boot::unique_fd client(::accept4(fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!client) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) continue;
      return unexpected(status::provider_error, "accept: " + boot::errno_text(errno), "listener");
    }
    boot::set_nodelay(client.get());
    auto hello = p_->handshake(client.get(), address, offer, deadline::after(p_->opts.handshake_timeout));
    if (hello) return hello;
    ++p_->refused;  // dropped; wait for the next one
  }
}

result<peer_hello> dial_hello(std::string_view where, std::string_view token, std::span<const std::byte> address,
                              std::span<const std::byte> offer, std::chrono::milliseconds timeout) {
  if (token.empty()) return unexpected(status::invalid_argument, "dial: the token is empty", "listener");
  if (address.empty() || address.size() > max_address_bytes || offer.size() > max_offer_bytes)
    return unexpected(status::invalid_argument, "dial: an empty or oversized address or offer", "listener");
  auto hp = boot::parse_host_port(where, "dial address");
  if (!hp) return unexpected(std::move(hp).error());
  const deadline until = deadline::after(timeout);
  auto attempt = boot::connect_once(*hp, until);
  if (!attempt.fd)
    return unexpected(until.expired() ? status::timed_out : status::peer_unreachable,
                      "dial " + std::string(where) + ": " + attempt.error, "listener");
  const int fd = attempt.fd.get();
  boot::set_nodelay(fd);
  auto failed = [&](const io_result& io, const std::string& what) {
    return unexpected(io.status == io_status::closed ? status::access_denied : status_of(io),
                      "dial " + std::string(where) + ": " + what + ": " + boot::describe(io) +
                          (io.status == io_status::closed ? " (a listener drops clients with another token)" : ""),
                      "listener");
  };
  std::array<std::byte, 4 + nonce_bytes> greeting{};
  if (auto io = recv_exact(fd, greeting, until); !io.ok()) return failed(io, "greeting");
  if (std::memcmp(greeting.data(), listener_magic, 4) != 0)
    return unexpected(status::invalid_argument, "dial " + std::string(where) + ": not a fabrix listener", "listener");
  nonce theirs{};
  std::memcpy(theirs.data(), greeting.data() + 4, nonce_bytes);
  nonce mine{};
  if (!boot::random_bytes(mine)) return unexpected(status::provider_error, "no random bytes for a nonce", "listener");
  const auto hello = encode_hello(client_magic, &mine, nullptr, address, offer);
  const auto hello_mac = mac_of(token, "fabrix-listen client", theirs, nullptr, hello);
  const std::span<const std::byte> pieces[] = {hello, hello_mac};
  if (auto io = boot::send_all(fd, pieces, until); !io.ok()) return failed(io, "hello");
  std::array<std::byte, 4 + 4 + 8> head{};
  if (auto io = recv_exact(fd, head, until); !io.ok()) return failed(io, "answer");
  if (std::memcmp(head.data(), answer_magic, 4) != 0)
    return unexpected(status::invalid_argument, "dial " + std::string(where) + ": a malformed answer", "listener");
  peer_hello got;
  std::vector<std::byte> message;
  if (auto r = read_payload(fd, head, message, got, until, "the listener"); !r) return unexpected(std::move(r).error());
  boot::digest mac{};
  if (auto io = recv_exact(fd, mac, until); !io.ok()) return failed(io, "answer MAC");
  if (!boot::digests_equal(mac, mac_of(token, "fabrix-listen listener", mine, &theirs, message)))
    return unexpected(status::access_denied,
                      "dial " + std::string(where) + ": the listener's answer is not MAC'd with our token", "listener");
  got.peer_id = detail::load_le<std::uint32_t>(head.data() + 4);
  got.from = boot::peer_name(fd);
  return got;
}

}  // namespace fabrix
