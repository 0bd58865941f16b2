// Connecting an RC queue pair to a peer domain, given its address blob.
//
// The blob carries the peer's UD queue pair; both sides of a connection
// trade their RC queue pair numbers and PSNs in "hello" datagrams
// (address.hpp) and move their RC queue pair to RTR as soon as they have the
// other's, to RTS once the other confirms it has theirs. Hellos are
// repeated every 100 ms until confirmed, and a connected domain answers
// the hellos of a peer still connecting from poll() (answers are marked and
// never answered), so a lost datagram only costs time.
//
// So connect() is symmetric: it returns when the peer has called connect()
// with our address as well (connect_all does exactly that), or fails with
// timed_out after options::connect_timeout. The k-th connect() between two
// domains pairs with the k-th on the other side. A domain connecting to
// itself gets a queue pair looped back to itself, without datagrams.
// Completions that arrive while connect() waits are kept for poll().
// With options::connect == rdma_cm, cm.hpp connects instead of the hellos
// (the loopback to self stays as it is).
#pragma once

#include <fabrix/result.hpp>
#include <fabrix/verbs/detail/address.hpp>
#include <fabrix/verbs/detail/cm.hpp>
#include <fabrix/verbs/detail/progress.hpp>
#include <fabrix/verbs/detail/qp.hpp>
#include <fabrix/verbs/detail/state.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <random>

namespace fabrix::verbs::detail {

// Gives `p` a free slot (domain_state::slots, for its wr_ids). False when
// all max_slots are taken.
inline bool take_slot(domain_state& d, peer_state& p) {
  const auto free = std::find(d.slots.begin(), d.slots.end(), nullptr);
  if (free == d.slots.end() && d.slots.size() >= max_slots) return false;
  p.slot = static_cast<std::uint32_t>(free - d.slots.begin());
  if (free == d.slots.end())
    d.slots.push_back(&p);
  else
    *free = &p;
  return true;
}

inline void forget_peer(domain_state& d, peer_state& p) {
  std::erase(d.peers, &p);
  if (p.qp) d.by_qpn.erase(p.qp->qp_num);
  if (p.slot < d.slots.size() && d.slots[p.slot] == &p) d.slots[p.slot] = nullptr;
}

inline void destroy_peer_resources(peer_state& p) {
  if (p.qp) ibv_destroy_qp(p.qp);
  if (p.ah) ibv_destroy_ah(p.ah);
  if (p.cm_id) rdma_destroy_id(p.cm_id);  // drops its unread events
  p.qp = nullptr;
  p.qpx = nullptr;
  p.ah = nullptr;
  p.cm_id = nullptr;
}

// Takes the hello for (peer, seq) out of `pending`, if it has come.
inline std::optional<hello> claim_hello(domain_state& d, std::uint64_t from, std::uint32_t seq) {
  for (auto it = d.pending.begin(); it != d.pending.end(); ++it) {
    if (it->from == from && it->seq == seq) {
      hello h = *it;
      d.pending.erase(it);
      return h;
    }
  }
  return std::nullopt;
}

inline result<void> exchange_hellos(domain_state& d, peer_state& p) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + d.opts.connect_timeout;
  auto last_sent = clock::time_point{};
  bool have_theirs = false, they_have_mine = false;
  while (!(have_theirs && they_have_mine)) {
    while (auto h = claim_hello(d, p.remote.nonce, p.seq)) {
      if (h->has_yours) they_have_mine = true;
      if (!have_theirs || h->rc_qpn != p.peer_qpn || h->psn != p.peer_psn) {
        if (have_theirs)
          return unexpected(status::provider_error, "peer changed its queue pair during the handshake", "verbs");
        have_theirs = true;
        p.peer_qpn = h->rc_qpn;
        p.peer_psn = h->psn;
        if (auto r = rc_to_rtr(d, p.qp, p.remote, p.peer_qpn, p.peer_psn); !r) return r;
        if (send_hello(d, p, true)) last_sent = clock::now();
      }
    }
    if (have_theirs && they_have_mine) break;
    const auto now = clock::now();
    if (now > deadline)
      return unexpected(status::timed_out,
                        "peer did not connect back within " + std::to_string(d.opts.connect_timeout.count()) +
                            " ms (both sides must connect() to each other)",
                        "verbs");
    if (now - last_sent > std::chrono::milliseconds(100) && send_hello(d, p, have_theirs)) last_sent = now;
    if (drive(d, ~std::size_t{0}) == 0) ::usleep(100);
  }
  return {};
}

// `peer_id`: what completions arriving on the queue pair carry (completion::peer).
inline result<std::unique_ptr<peer_state>> connect_peer(domain_state& d, std::span<const std::byte> blob,
                                                        std::uint32_t peer_id) {
  auto addr = parse_address(blob);
  if (!addr) return unexpected(std::move(addr).error());
  if (addr->link_layer != d.dev.link_layer)
    return unexpected(status::invalid_argument, "peer is on another link layer (InfiniBand vs Ethernet)", "verbs");
  const auto theirs = addr->connect == 1 ? connect_method::rdma_cm : connect_method::bootstrap;
  if (theirs != d.opts.connect)
    return unexpected(status::invalid_argument,
                      std::string("peer connects through ") + to_string(theirs) + " and this domain through " +
                          to_string(d.opts.connect) + " (set FABRIX_VERBS_CONNECT the same on both sides)",
                      "verbs");
  auto p = std::make_unique<peer_state>(d.opts.sq_depth);
  p->dom = &d;
  p->remote = *addr;
  p->max_sge = d.max_sge;
  p->max_inline = d.max_inline;
  p->wrs = std::make_unique<ibv_send_wr[]>(d.opts.sq_depth);
  p->sges = std::make_unique<ibv_sge[]>(static_cast<std::size_t>(d.opts.sq_depth) * d.max_sge);
  p->peer_id = peer_id;  // before the handshake: a message may arrive while it runs
  p->recv_capacity = static_cast<std::uint32_t>(
      d.opts.recv_depth ? std::min<std::size_t>(d.opts.recv_depth, d.max_posted_recvs) : d.max_posted_recvs);
  p->recvs = std::make_unique<recv_wanted[]>(p->recv_capacity);
  p->qp = create_rc_qp(d, d.max_inline, d.wr_api ? &p->qpx : nullptr);
  if (p->qp == nullptr) return fail(errno, "ibv_create_qp(RC)");
  std::random_device rd;
  p->my_psn = rd() & max_qpn;

  auto undo = [&](fabrix::error e) {
    forget_peer(d, *p);
    destroy_peer_resources(*p);
    return unexpected(std::move(e));
  };
  d.by_qpn[p->qp->qp_num] = p.get();
  d.peers.push_back(p.get());
  if (!take_slot(d, *p))
    return undo(fabrix::error{status::unsupported, "verbs", 0, "more than 2^24 queue pairs on one domain"});
  if (addr->nonce != d.nonce && d.opts.connect == connect_method::rdma_cm) {
    p->seq = d.connects_to[addr->nonce]++;
    if (auto r = cm_connect_peer(d, *p); !r) return undo(r.error());
    p->connected = true;
    return p;
  }
  if (auto r = rc_to_init(d, p->qp); !r) return undo(r.error());

  if (addr->nonce == d.nonce) {  // loopback to ourselves
    p->peer_qpn = p->qp->qp_num;
    p->peer_psn = p->my_psn;
    if (auto r = rc_to_rtr(d, p->qp, p->remote, p->peer_qpn, p->peer_psn); !r) return undo(r.error());
  } else {
    p->seq = d.connects_to[addr->nonce]++;
    ibv_ah_attr ah = address_handle_attr(d, p->remote);
    p->ah = ibv_create_ah(d.pd, &ah);
    if (p->ah == nullptr) return undo(fail(errno, "ibv_create_ah").value);
    if (auto r = exchange_hellos(d, *p); !r) return undo(r.error());
  }
  if (auto r = rc_to_rts(d, p->qp, p->my_psn); !r) return undo(r.error());
  p->connected = true;
  return p;
}

}  // namespace fabrix::verbs::detail
