// An RC queue pair to one peer (the provider side of fabrix::queue_pair).
//
// Failure: the first error completion on the queue pair (the device puts it
// in the error state) marks it failed; later posts return
// status::peer_unreachable at once and failure() says what happened. It is
// never reset and reused. Destroying the endpoint moves the queue pair to
// error, collects the flushed completions (status canceled, delivered by
// poll) for up to 2 s, and cancels recv()s still waiting.
//
// Options and completion levels (post.hpp has how each is posted):
// set_default_options() stores the queue pair's defaults, applied to each
// operation through detail::options_of when its work request is built;
// finished() counts its unsignaled operations that have retired, fine or
// failed — at the latest when a later signaled completion (a flush's)
// arrives, since RC completes in order.
#pragma once

#include <fabrix/operation.hpp>
#include <fabrix/verbs/handshake.hpp>
#include <fabrix/verbs/post.hpp>
#include <fabrix/verbs/progress.hpp>
#include <fabrix/verbs/state.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <utility>

namespace fabrix::verbs {

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

  status post(std::span<const operation> ops, std::size_t& posted) { return detail::post_ops(*p_, ops, posted); }

  void set_default_options(op_options defaults) { p_->defaults = defaults; }
  std::uint64_t finished() const noexcept { return p_ ? p_->finished : 0; }

  // An imported key is checked once (rkey_for: owner, seal, key size).
  result<import_ref> import_key(const remote_buffer& rb) {
    std::uint32_t rkey = 0;
    if (!detail::rkey_for(*p_, rb, rkey))
      return unexpected(status::invalid_argument, "import: not made by this peer, or its seal or key is broken",
                        "verbs");
    auto ref = p_->imports.add({rb.address, rkey});
    if (!ref) return unexpected(status::no_memory, "import: too many imported keys on this queue pair", "verbs");
    return *ref;
  }
  status release_key(import_ref ref) { return p_->imports.release(ref) ? status::ok : status::invalid_argument; }

  bool failed() const noexcept { return p_ && p_->failed; }
  // Why the queue pair failed (empty while it works).
  std::string failure() const { return p_ ? p_->failure_text : std::string("moved-from endpoint"); }
  std::uint32_t qp_num() const noexcept { return p_->qp->qp_num; }
  // How this queue pair was connected: "rdma_cm", "bootstrap" (UD hellos)
  // or "loopback" (to its own domain).
  const char* connected_by() const noexcept {
    if (p_->cm_id) return "rdma_cm";
    return p_->remote.nonce == p_->dom->nonce ? "loopback" : "bootstrap";
  }
  std::uint32_t max_inline() const noexcept { return p_->max_inline; }
  detail::peer_state& state() noexcept { return *p_; }

 private:
  void teardown() noexcept {
    if (!p_) return;
    detail::peer_state& p = *p_;
    detail::domain_state& d = *p.dom;
    // rdma_cm: tell the peer (it sees DISCONNECTED and fails its side at once).
    if (p.cm_id && p.phase == detail::peer_state::cm_phase::up && !p.disconnected) (void)rdma_disconnect(p.cm_id);
    if (p.qp) {
      detail::to_error(p.qp);
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
      while (!p.ring.empty() && std::chrono::steady_clock::now() < deadline)
        if (detail::drive(d, ~std::size_t{0}) == 0) ::usleep(100);
      if (!p.ring.empty()) {
        std::fprintf(stderr, "fabrix verbs: %u work requests did not flush in 2 s; abandoning them\n",
                     p.ring.in_flight());
        // Their CQ credits come back, and a liveness probe among them gives
        // back its reserved place instead (it took no credit).
        // Abandoned unsignaled operations count as finished (failed).
        std::uint32_t probes = 0;
        const std::uint32_t n = p.ring.retire_through(p.ring.next_seq() - 1, [&](const detail::sq_entry& e, bool) {
          probes += e.internal ? 1 : 0;
          p.finished += e.unsignaled ? 1 : 0;
        });
        d.credits.give(n - probes);
        d.probes_in_flight -= probes;
      }
    }
    detail::fail_waiting_recvs(d, p, status::canceled);
    detail::forget_peer(d, p);
    detail::destroy_peer_resources(p);
    p_.reset();
  }

  std::unique_ptr<detail::peer_state> p_;
};

}  // namespace fabrix::verbs
