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

#include <fabrix/detail/endpoint_base.hpp>
#include <fabrix/detail/import_table.hpp>
#include <fabrix/operation.hpp>
#include <fabrix/verbs/detail/handshake.hpp>
#include <fabrix/verbs/detail/post.hpp>
#include <fabrix/verbs/detail/progress.hpp>
#include <fabrix/verbs/detail/state.hpp>
#include <fabrix/verbs/native.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <utility>

namespace fabrix::verbs {

namespace detail {

struct close_endpoint {
  void operator()(std::unique_ptr<peer_state>&& owned) const noexcept {
    peer_state& p = *owned;
    domain_state& d = *p.dom;
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
  }
};

class endpoint_impl : public fabrix::detail::endpoint_base<detail::peer_state, detail::close_endpoint> {
 public:
  native_queue_pair native() const noexcept { return {p_ ? p_->qp : nullptr}; }
  using endpoint_base::endpoint_base;

  status post(std::span<const operation> ops, std::size_t& posted) { return detail::post_ops(*p_, ops, posted); }

  // An imported key is checked once (rkey_for: owner, seal, key size).
  result<import_ref> import_key(const remote_buffer& rb) {
    std::uint32_t rkey = 0;
    const bool ok = detail::rkey_for(*p_, rb, rkey);
    return fabrix::detail::import_into(
        p_->imports, ok ? std::optional(detail::peer_state::imported_region{rb.address, rkey}) : std::nullopt, "verbs");
  }
  status release_key(import_ref ref) { return fabrix::detail::release_from(p_->imports, ref); }

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
};

}  // namespace detail
}  // namespace fabrix::verbs
