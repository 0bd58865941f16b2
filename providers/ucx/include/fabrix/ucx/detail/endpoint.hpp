// A UCX endpoint to one peer (the provider side of fabrix::queue_pair).
//
// Peer failure (see domain.hpp for how it is detected): in-flight operations
// complete with errors, later posts return status::peer_unreachable, and the
// endpoint is never reused.
#pragma once

#include <fabrix/detail/endpoint_base.hpp>
#include <fabrix/detail/import_table.hpp>
#include <fabrix/operation.hpp>
#include <fabrix/ucx/detail/post.hpp>
#include <fabrix/ucx/detail/state.hpp>
#include <fabrix/ucx/native.hpp>

#include <chrono>
#include <cstdio>
#include <memory>
#include <span>
#include <utility>
#include <vector>

namespace fabrix::ucx {

namespace detail {

// Cancels what is still pending on this endpoint (completions say
// canceled) and hands the endpoint to the domain, which closes it without
// ever waiting on a peer that is gone, and without making this call wait:
//  - error-handling (PEER) endpoints: a flush first, so what was posted
//    reaches a live peer, cut short after close_limit, when UCX reports the
//    peer failed or (same node) its process is gone; then
//    UCP_EP_CLOSE_FLAG_FORCE, which does not wait for the peer at all.
//    (A graceful close waits for the peer's acknowledgements, e.g. on the
//    ud_verbs wire-up/keepalive lane, until UCX's own timeout when the peer
//    has exited — and peers routinely exit before each other.)
//  - other endpoints (shared memory; FORCE needs PEER mode): a graceful
//    close, which does not need a live peer's help (a dead one: below).
// The domain moves all closing endpoints on together in poll()/wait() and
// before it destroys the worker (domain_state::advance_closing), so closing
// many queue pairs to a peer that does not poll costs one close_limit in
// all, not one each.
struct close_endpoint {
  void operator()(std::unique_ptr<peer_state>&& owned) const noexcept {
    peer_state& p = *owned;
    domain_state& d = *p.dom;
    const bool was_failed = p.failed || (p.same_node && detail::process_gone(p.identity));
    std::erase(d.watched, &p);
    d.remove_peer(&p);
    p.failed = true;
    for (detail::op_slot* op = d.recvs.begin(); op != d.recvs.end(); ++op) {
      if (op->in_use && op->peer == &p && op->request) ucp_request_cancel(d.worker, op->request);
    }
    while (detail::op_slot* f = p.parked.pop_front()) d.deferred.push_back(f);
    while (detail::op_slot* w = p.parked_imms.pop_front()) d.deferred.push_back(w);
    while (detail::op_slot* w = p.flush_waiters.pop_front()) d.deferred.push_back(w);
    detail::run_deferred(d);
    // Replies queued for this peer are dropped.
    for (detail::reply_slot* r = d.replies_head; r; r = r->next)
      if (r->to == &p) r->to = nullptr;
    // Requests UCX still holds must not reach the closed queue pair:
    // detached ops complete as canceled when UCX lets go of them, checked
    // requests at once (their replies would find nobody). Their rkeys live
    // in the peer state until the close is done.
    d.each_slot([&](detail::op_slot* op) {
      if (!op->in_use || op->peer != &p) return;
      op->peer = nullptr;
      if (op->rkey) {
        detail::rkey_cache::release(op->rkey);
        op->rkey = nullptr;
      }
      detail::drop_reply(op, UCS_ERR_CANCELED);
    });

    detail::closing_endpoint c;
    c.was_failed = was_failed;
    c.flush_deadline = std::chrono::steady_clock::now() + detail::domain_state::close_limit;
    if (p.detects_failure && !was_failed) {
      ucp_request_param_t fp{};
      if (ucs_status_ptr_t r = ucp_ep_flush_nbx(p.ep, &fp); UCS_PTR_IS_PTR(r)) c.flush = r;
    }
    c.peer = std::move(owned);
    d.closing.push_back(std::move(c));
    d.advance_closing();
  }
};

class endpoint_impl : public fabrix::detail::endpoint_base<detail::peer_state, detail::close_endpoint> {
 public:
  native_queue_pair native() const noexcept { return {p_ ? p_->ep : nullptr}; }
  using endpoint_base::endpoint_base;

  status post(std::span<const operation> ops, std::size_t& posted) {
    return post_each(ops, posted, [](auto& p, const operation& o) { return detail::post_one(p, o); });
  }

  // set_default_options: the queue pair's default options, applied per op
  // through detail::options_of (post.hpp says what each option costs here).
  // finished(): unsignaled ops finished (ok or failed), counted when their
  // completion would have been pushed (deliver), a direct op inside post().

  // An imported key is the cache entry rkey_for makes (seal checked, rkey
  // unpacked once), held so that the cache never evicts it.
  result<import_ref> import_key(const remote_buffer& rb) {
    detail::rkey_cache::entry* e = detail::rkey_for(*p_, rb);
    auto ref = fabrix::detail::import_into(p_->imports, e ? std::optional(e) : std::nullopt, "ucx");
    if (ref) detail::rkey_cache::hold(e);
    return ref;
  }
  status release_key(import_ref ref) {
    auto e = p_->imports.release(ref);
    if (!e) return status::invalid_argument;
    detail::rkey_cache::release(*e);
    return status::ok;
  }
};

}  // namespace detail
}  // namespace fabrix::ucx

namespace fabrix::ucx::detail {

// Starts the close of `c`'s endpoint (once its flush is over). A dead
// shared-memory peer's endpoint is not closed at all: FORCE needs PEER mode
// (UCX 1.13 refuses it), and a graceful close would wait forever for
// operations the dead peer never serves. ucp_worker_destroy releases it (UCX
// warns about its unflushed operations).
inline void start_close(domain_state& d, closing_endpoint& c) noexcept {
  (void)d;
  peer_state& p = *c.peer;
  c.close_started = true;
  if (!p.detects_failure && c.was_failed) return;
  ucp_request_param_t cp{};
  cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  cp.flags = p.detects_failure ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  const ucs_status_ptr_t r = ucp_ep_close_nbx(p.ep, &cp);
  if (UCS_PTR_IS_PTR(r))
    c.close = r;
  else if (UCS_PTR_STATUS(r) != UCS_OK)
    std::fprintf(stderr, "fabrix ucx: ucp_ep_close_nbx: %s\n", ucs_status_string(UCS_PTR_STATUS(r)));
}

// Moves every closing endpoint on (no progress of its own): flushes that are
// done, whose peer failed or died, or that ran out of time give way to the
// close; endpoints whose requests are all done are released.
inline void domain_state::advance_closing() noexcept {
  using clock = std::chrono::steady_clock;
  const auto now = clock::now();
  const bool look_at_proc = now >= next_closing_check;
  if (look_at_proc) next_closing_check = now + std::chrono::milliseconds(20);
  std::erase_if(closing, [&](closing_endpoint& c) {
    reap_request(c.flush);
    if (!c.close_started) {
      peer_state& p = *c.peer;
      const bool peer_gone = p.failure != UCS_OK || (look_at_proc && p.same_node && process_gone(p.identity));
      if (c.flush == nullptr || peer_gone || now >= c.flush_deadline) start_close(*this, c);
    }
    reap_request(c.close);
    return c.close_started && c.flush == nullptr && c.close == nullptr;
  });
}

inline domain_state::~domain_state() {
  if (worker) {
    const auto deadline = std::chrono::steady_clock::now() + 2 * close_limit;
    for (advance_closing(); !closing.empty() && std::chrono::steady_clock::now() < deadline; advance_closing()) {
      ucp_worker_progress(worker);
      run_deferred(*this);
    }
    if (!closing.empty())
      std::fprintf(stderr, "fabrix ucx: %zu endpoint close(s) did not finish in %lld ms; releasing them to UCX\n",
                   closing.size(), static_cast<long long>(2 * close_limit.count()));
    for (closing_endpoint& c : closing) {
      if (c.flush) ucp_request_free(c.flush);
      if (c.close) ucp_request_free(c.close);
      std::vector<ucp_rkey_h> leaked;  // UCX may still use them: not destroyed
      c.peer->rkeys.drain_to(leaked);
    }
    closing.clear();
    ucp_worker_destroy(worker);
  }
  if (recv_dt) ucp_dt_destroy(recv_dt);
  if (context) ucp_cleanup(context);
}

}  // namespace fabrix::ucx::detail
