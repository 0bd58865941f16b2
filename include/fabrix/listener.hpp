// fabrix::listener and fabrix::dial — peers that join a running process at
// any time, without a job-wide bootstrap (the disaggregated-serving
// pattern): a server listens on a TCP port; a client dials it with its
// domain's address blob; each side learns the other's, and both connect.
//
//   // server                                      // client (any time later)
//   auto l = fabrix::listener::open(              auto qp = fabrix::dial(dom, "10.0.0.1:7000",
//       "0.0.0.0:7000", token).value();                token, my_offer).value();
//   for (;;) {                                     // qp.peer_id(): the id the server gave us
//     auto peer = fabrix::accept(dom, l,           // qp.offer(): the server's extra bytes
//         1000ms, server_offer);
//     if (peer) serve(std::move(*peer));          // peer->qp, peer->offer, peer->id
//   }
//
// Each side may attach extra bytes to its hello ("offer": encoded
// remote_buffers, a role, ...), up to max_offer_bytes. The listener gives
// each peer it accepts an id, counting from 1 (the queue pair's peer_id(),
// so the peer's notifications and messages name it); the client's queue
// pair to the listener has peer id 0.
//
// Handshake (one TCP connection, closed once it is done): the listener
// sends a fresh nonce; the client answers with its nonce, its address blob
// and offer, and an HMAC-SHA256 under the shared token over both nonces and
// everything it sent; the listener checks it and answers with the peer id,
// its own blob and offer, MAC'd the same way in the other direction. A
// client without the token is dropped before it learns anything but the
// listener's nonce; a listener without it is refused by the client
// (access_denied). Every read is bounded (lengths and a deadline): a
// malformed, truncated or oversized hello is refused, never trusted. As in
// bootstrap.hpp, this authenticates and does not encrypt.
//
// Threading and cost: no thread is started. accept() handles one
// connecting peer at a time within its timeout, and spends at most
// handshake_timeout on any one (a peer that connects and says nothing
// delays the next by that much); fd() is readable when a peer is
// connecting, for programs that watch many descriptors. connect() on the
// two sides runs as the provider's connect() does (verbs: both sides
// connect at once, which accept() and dial() do).
//
// Leaving: a peer that goes away is the provider's business as for any peer
// (its operations fail with peer_unreachable); the listener keeps nothing
// per peer once accept() has returned.
#pragma once

#include <fabrix/domain.hpp>
#include <fabrix/result.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fabrix {

inline constexpr std::size_t max_address_bytes = 64 * 1024;
inline constexpr std::size_t max_offer_bytes = 1024 * 1024;

// What one side of a handshake learned about the other.
struct peer_hello {
  std::vector<std::byte> address;  // the other side's domain address blob
  std::vector<std::byte> offer;    // its extra bytes
  std::uint32_t peer_id = 0;       // the id the listener gave the client
  std::string from;                // "host:port" of the other end
};

class listener {
 public:
  struct options {
    std::chrono::milliseconds handshake_timeout{5000};
  };

  // Listens on `where` ("host:port"; port 0: one the kernel picks, see
  // address()) for clients that know `token` (non-empty). Errors:
  // invalid_argument (bad address or empty token), provider_error (the
  // socket calls, errno named).
  static result<listener> open(std::string_view where, std::string_view token, options opts);
  static result<listener> open(std::string_view where, std::string_view token) { return open(where, token, {}); }

  listener(listener&&) noexcept;
  listener& operator=(listener&&) noexcept;
  ~listener();

  // "host:port" it listens on (the port chosen when 0 was asked).
  std::string address() const;
  // Readable when a client is connecting.
  int fd() const noexcept;

  // The next client that completes the handshake within `timeout`, given
  // the next peer id and `address` + `offer` as this side's hello.
  // timed_out when none did; clients that fail the handshake are dropped
  // and counted (refused()), and accept() goes on waiting for the next.
  // A handshake that has begun runs to its own end (at most
  // handshake_timeout), so a call returns within `timeout` plus at most
  // one handshake_timeout.
  result<peer_hello> accept_hello(std::span<const std::byte> address, std::span<const std::byte> offer,
                                  std::chrono::milliseconds timeout);
  // Clients dropped so far: wrong token, malformed or truncated hello,
  // silent past handshake_timeout.
  std::uint64_t refused() const noexcept;

  struct impl;

 private:
  explicit listener(std::unique_ptr<impl> p) noexcept;
  std::unique_ptr<impl> p_;
};

// The client's side: connects to the listener at `where`, sends `address` +
// `offer`, returns the listener's hello. access_denied when the listener
// does not prove it knows `token` (or drops us: a wrong token here),
// timed_out past `timeout`, peer_unreachable when nothing listens there,
// invalid_argument for a malformed answer or bad input.
result<peer_hello> dial_hello(std::string_view where, std::string_view token, std::span<const std::byte> address,
                              std::span<const std::byte> offer, std::chrono::milliseconds timeout);

// A queue pair to an accepted client, with what it sent.
template <provider P>
struct accepted_peer {
  queue_pair<P> qp;
  std::vector<std::byte> offer;
  std::uint32_t id = 0;
  std::string from;
};

// A client dialled: the queue pair to the listener, and its offer.
template <provider P>
struct dialled_peer {
  queue_pair<P> qp;
  std::vector<std::byte> offer;
  std::uint32_t my_id = 0;  // the id the listener gave this process
};

// accept_hello + domain::connect (peer id: the client's id).
template <provider P>
result<accepted_peer<P>> accept(domain<P>& dom, listener& l, std::chrono::milliseconds timeout,
                                std::span<const std::byte> offer = {}) {
  auto address = dom.address();
  if (!address) return unexpected(std::move(address).error());
  auto hello = l.accept_hello(*address, offer, timeout);
  if (!hello) return unexpected(std::move(hello).error());
  auto qp = dom.connect(hello->address, hello->peer_id);
  if (!qp) return unexpected(std::move(qp).error());
  return accepted_peer<P>{std::move(*qp), std::move(hello->offer), hello->peer_id, std::move(hello->from)};
}

// dial_hello + domain::connect (peer id 0: the listener).
template <provider P>
result<dialled_peer<P>> dial(domain<P>& dom, std::string_view where, std::string_view token,
                             std::chrono::milliseconds timeout, std::span<const std::byte> offer = {}) {
  auto address = dom.address();
  if (!address) return unexpected(std::move(address).error());
  auto hello = dial_hello(where, token, *address, offer, timeout);
  if (!hello) return unexpected(std::move(hello).error());
  auto qp = dom.connect(hello->address, 0);
  if (!qp) return unexpected(std::move(qp).error());
  return dialled_peer<P>{std::move(*qp), std::move(hello->offer), hello->peer_id};
}

}  // namespace fabrix
