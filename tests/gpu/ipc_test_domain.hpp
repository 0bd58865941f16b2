// A cuda_ipc domain state for the control-plane tests: real sockets, no
// CUDA stream, connected the way domain_impl::connect does. Shared by the
// unit_cuda_ipc test files.
#pragma once

#include <doctest/doctest.h>
#include <fabrix/cuda_ipc.hpp>

#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

namespace ipc_test {

namespace ipc = fabrix::cuda::ipc;
namespace detail = fabrix::cuda::ipc::detail;
using fabrix::completion;
using fabrix::status;

struct test_domain {
  std::unique_ptr<detail::domain_state> d;
  std::vector<std::unique_ptr<detail::peer_state>> peers;

  explicit test_domain(std::uint64_t nonce, std::size_t max_recvs = 64)
      : d(std::make_unique<detail::domain_state>(0, 64, max_recvs)) {
    d->nonce = nonce;
    for (std::size_t i = 0; i < d->secret.size(); ++i) d->secret[i] = static_cast<std::uint8_t>(nonce * 31 + i);
    d->socket_name = "fabrix-unit-" + std::to_string(::getpid()) + "-" + std::to_string(nonce);
    auto l = ipc::listen_abstract(d->socket_name);
    REQUIRE(l.has_value());
    d->listener = std::move(*l);
    d->bell = ipc::doorbell::create();  // as domain_impl::create
  }
  ~test_domain() {
    for (auto& p : peers) std::erase(d->peers, p.get());
  }
  // Connects to `to` the way domain_impl::connect does (minus the CUDA stream).
  detail::peer_state& connect(test_domain& to, bool honest_hello = true, std::uint32_t peer_id = 0) {
    auto fd = ipc::connect_abstract(to.d->socket_name);
    REQUIRE(fd.has_value());
    auto l = std::make_unique<detail::link>();
    l->fd = std::move(*fd);
    l->nonce = to.d->nonce;
    l->outgoing = true;
    const std::uint64_t proof = honest_hello ? ipc::hello_proof(to.d->secret, d->nonce) : 12345;
    REQUIRE(detail::send_control(*l, ipc::packet_type::hello, d->nonce, proof) == status::ok);
    auto p = std::make_unique<detail::peer_state>();
    p->dom = d.get();
    p->peer_id = peer_id;
    p->nonce = to.d->nonce;
    p->seq = d->connects_to[to.d->nonce]++;
    p->secret = to.d->secret;
    p->out = l.get();
    d->links.push_back(std::move(l));
    d->peers.push_back(p.get());
    peers.push_back(std::move(p));
    return *peers.back();
  }
  void pump(int rounds = 5) {
    for (int i = 0; i < rounds; ++i) detail::serve_links(*d, 5);
  }
  std::vector<completion> drain() {
    completion c[64];
    const std::size_t n = d->ring.drain(c);
    return {c, c + n};
  }
};

}  // namespace ipc_test
