// A UCX endpoint to one peer (the provider side of fabrix::queue_pair).
//
// Peer failure (see domain.hpp for how it is detected): in-flight operations
// complete with errors, later posts return status::peer_unreachable, and the
// endpoint is never reused.
#pragma once

#include <fabrix/operation.hpp>
#include <fabrix/ucx/post.hpp>
#include <fabrix/ucx/state.hpp>

#include <chrono>
#include <cstdio>
#include <memory>
#include <span>
#include <utility>
#include <vector>

namespace fabrix::ucx {

class endpoint_impl {
 public:
  explicit endpoint_impl(std::unique_ptr<detail::peer_state> p) : p_(std::move(p)) {}
  endpoint_impl(endpoint_impl&&) noexcept = default;
  endpoint_impl& operator=(endpoint_impl&& o) noexcept {
    if (this != &o) {
      teardown();
      p_ = std::move(o.p_);
    }
    return *this;
  }
  ~endpoint_impl() { teardown(); }

  status post(std::span<const operation> ops, std::size_t& posted) {
    for (posted = 0; posted < ops.size(); ++posted) {
      if (status s = detail::post_one(*p_, ops[posted]); s != status::ok) return s;
    }
    return status::ok;
  }

  bool failed() const noexcept { return p_ && p_->failed; }

 private:
  // Cancels what is still pending on this endpoint (completions say
  // canceled) and closes it without ever waiting on a peer that is gone:
  //  - error-handling (PEER) endpoints: a flush first, so what was posted
  //    reaches a live peer, waited for at most close_limit and cut short when
  //    UCX reports the peer failed or (same node) its process is gone; then
  //    UCP_EP_CLOSE_FLAG_FORCE, which does not wait for the peer at all.
  //    (A graceful close waits for the peer's acknowledgements, e.g. on the
  //    ud_verbs wire-up/keepalive lane, until UCX's own timeout when the peer
  //    has exited — and peers routinely exit before each other.)
  //  - other endpoints (shared memory; FORCE needs PEER mode): a graceful
  //    close, which does not need a live peer's help (a dead one: below).
  // Requests still running after the bound go to the domain, which finishes
  // them before it destroys the worker; the rkeys wait for them.
  void teardown() noexcept {
    if (!p_) return;
    detail::peer_state& p = *p_;
    detail::domain_state& d = *p.dom;
    const bool was_failed = p.failed || (p.same_node && detail::process_gone(p.identity));
    std::erase(d.watched, &p);
    p.failed = true;
    for (detail::op_slot* op = d.ops.begin(); op != d.ops.end(); ++op) {
      if (op->in_use && op->peer == &p && op->c.op == opcode::recv && op->request)
        ucp_request_cancel(d.worker, op->request);
    }
    while (detail::op_slot* f = p.parked_flushes.pop_front()) d.deferred.push_back(f);

    using clock = std::chrono::steady_clock;
    detail::closing_endpoint c;
    if (p.detects_failure && !was_failed) {
      ucp_request_param_t fp{};
      if (ucs_status_ptr_t r = ucp_ep_flush_nbx(p.ep, &fp); UCS_PTR_IS_PTR(r)) c.flush = r;
      const auto deadline = clock::now() + detail::domain_state::close_limit;
      auto next_check = clock::now();
      // on_peer_error sets p.failure when UCX gives up on the peer.
      while (c.flush && p.failure == UCS_OK && clock::now() < deadline) {
        ucp_worker_progress(d.worker);
        detail::run_deferred(d);
        detail::reap_request(c.flush);
        if (p.same_node && clock::now() >= next_check) {
          if (detail::process_gone(p.identity)) break;
          next_check = clock::now() + std::chrono::milliseconds(20);
        }
      }
    }
    if (p.failure == UCS_OK) p.failure = UCS_ERR_CANCELED;

    // A dead shared-memory peer's endpoint is not closed at all: FORCE needs
    // PEER mode (UCX 1.13 refuses it), and a graceful close would wait
    // forever for operations the dead peer never serves. ucp_worker_destroy
    // releases it (UCX warns about its unflushed operations).
    if (p.detects_failure || !was_failed) {
      ucp_request_param_t cp{};
      cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      cp.flags = p.detects_failure ? UCP_EP_CLOSE_FLAG_FORCE : 0;
      const ucs_status_ptr_t r = ucp_ep_close_nbx(p.ep, &cp);
      if (UCS_PTR_IS_PTR(r))
        c.close = r;
      else if (UCS_PTR_STATUS(r) != UCS_OK)
        std::fprintf(stderr, "fabrix ucx: ucp_ep_close_nbx: %s\n", ucs_status_string(UCS_PTR_STATUS(r)));
    }
    const auto deadline = clock::now() + detail::domain_state::close_limit;
    while ((c.flush || c.close) && clock::now() < deadline) {
      ucp_worker_progress(d.worker);
      detail::run_deferred(d);
      detail::reap_request(c.flush);
      detail::reap_request(c.close);
    }
    detail::run_deferred(d);
    // Requests UCX still holds must not reach the freed peer: detached ops
    // complete as canceled when UCX lets go of them. Their rkeys go with the
    // close requests, destroyed once those are done.
    for (detail::op_slot* op = d.ops.begin(); op != d.ops.end(); ++op) {
      if (op->in_use && op->peer == &p) {
        op->peer = nullptr;
        op->rkey = nullptr;
      }
    }
    p.rkeys.drain_to(c.rkeys);
    d.closing.push_back(std::move(c));
    d.reap_closing();
    p_.reset();
  }

  std::unique_ptr<detail::peer_state> p_;
};

}  // namespace fabrix::ucx
