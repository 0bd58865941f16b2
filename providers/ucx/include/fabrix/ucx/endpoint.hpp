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
  // canceled), closes it — gracefully unless the peer has failed — with a
  // bounded wait, and releases its rkeys.
  void teardown() noexcept {
    if (!p_) return;
    detail::peer_state& p = *p_;
    detail::domain_state& d = *p.dom;
    const bool was_failed = p.failed;
    std::erase(d.watched, &p);
    p.failed = true;
    if (p.failure == UCS_OK) p.failure = UCS_ERR_CANCELED;
    for (detail::op_slot* op = d.ops.begin(); op != d.ops.end(); ++op) {
      if (op->in_use && op->peer == &p && op->c.op == opcode::recv && op->request)
        ucp_request_cancel(d.worker, op->request);
    }
    while (detail::op_slot* f = p.parked_flushes.pop_front()) d.deferred.push_back(f);

    ucp_request_param_t prm{};
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    prm.flags = was_failed ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    ucs_status_ptr_t req = ucp_ep_close_nbx(p.ep, &prm);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (UCS_PTR_IS_PTR(req) && ucp_request_check_status(req) == UCS_INPROGRESS) {
      ucp_worker_progress(d.worker);
      detail::run_deferred(d);
      if (std::chrono::steady_clock::now() > deadline) {
        std::fprintf(stderr, "fabrix ucx: endpoint close did not finish in 2 s; abandoning it\n");
        break;
      }
    }
    if (UCS_PTR_IS_PTR(req) && ucp_request_check_status(req) != UCS_INPROGRESS) ucp_request_free(req);
    detail::run_deferred(d);
    // Requests UCX still holds (an abandoned close) must not reach the freed
    // peer: detached ops complete as canceled when UCX lets go of them.
    for (detail::op_slot* op = d.ops.begin(); op != d.ops.end(); ++op) {
      if (op->in_use && op->peer == &p) op->peer = nullptr;
    }
    for (auto& e : p.rkeys) ucp_rkey_destroy(e.rkey);
    p.rkeys.clear();
    p_.reset();
  }

  std::unique_ptr<detail::peer_state> p_;
};

}  // namespace fabrix::ucx
