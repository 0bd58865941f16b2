// A libfabric queue pair: one peer's address in the domain's address vector,
// reached through the domain's single FI_EP_RDM endpoint (the provider side
// of fabrix::queue_pair).
//
// Peer failure (see domain.hpp for how it is detected): in-flight and parked
// operations complete with errors, later posts return peer_unreachable.
// Destroying the endpoint cancels its posted receives (their completions say
// canceled) and completes its parked operations as canceled; operations
// already handed to libfabric still complete, without a peer. The peer's
// address-vector entry is removed with the last queue pair to it.
//
// Options (post.hpp): set_default_options() stores the queue pair's
// defaults, which post_one() merges once per operation (detail::options_of);
// finished() is the count of its unsignaled operations that have finished,
// kept by finish() and fail_peer() (progress.hpp).
#pragma once

#include <fabrix/detail/endpoint_base.hpp>
#include <fabrix/detail/import_table.hpp>
#include <fabrix/local_slice.hpp>
#include <fabrix/ofi/detail/post.hpp>
#include <fabrix/ofi/detail/state.hpp>
#include <fabrix/ofi/native.hpp>

#include <algorithm>
#include <memory>
#include <span>

namespace fabrix::ofi {

namespace detail {

struct close_endpoint {
  void operator()(std::unique_ptr<peer_state>&& owned) const noexcept {
    peer_state& p = *owned;
    domain_state& d = *p.dom;
    while (detail::op_slot* op = p.parked.pop_front()) detail::finish(d, op, status::canceled);
    bool in_flight = false;  // operations libfabric still holds, other than receives
    for (detail::op_slot* op = d.ops.begin(); op != d.ops.end(); ++op) {
      if (op->peer != &p || op->st == detail::slot_state::free) continue;
      if (op->st == detail::slot_state::posted && op->c.op == opcode::recv)
        fi_cancel(&d.ep->fid, &op->ctx);
      else if (op->st != detail::slot_state::parked)  // parked: a stale-key operation (post.hpp)
        in_flight = true;
      op->peer = nullptr;
      op->counted = false;
    }
    std::erase(d.peers, &p);
    if (p.busy) std::erase(d.busy, &p);
    // The address-vector entry goes with the last queue pair to its address
    // (a domain's address vector is bounded: shm 1.17 holds 256 peers), but
    // not while an operation to it is still in libfabric's hands: shm would
    // progress it against a peer region it has just unmapped. Such an entry
    // stays until the domain closes.
    const bool shared =
        std::any_of(d.peers.begin(), d.peers.end(), [&](const detail::peer_state* q) { return q->addr == p.addr; });
    if (!shared && !in_flight && p.addr != FI_ADDR_UNSPEC) (void)fi_av_remove(d.av, &p.addr, 1, 0);
  }
};

class endpoint_impl : public fabrix::detail::endpoint_base<detail::peer_state, detail::close_endpoint> {
 public:
  native_queue_pair native() const noexcept {
    return p_ ? native_queue_pair{p_->dom->ep, p_->addr} : native_queue_pair{nullptr, FI_ADDR_UNSPEC};
  }
  using endpoint_base::endpoint_base;

  status post(std::span<const operation> ops, std::size_t& posted) {
    return post_each(ops, posted, [](auto& p, const operation& o) { return detail::post_one(p, o); });
  }

  // An imported key is verified and decoded once (key_for); operations
  // then find it by index.
  result<import_ref> import_key(const remote_buffer& rb) {
    const detail::remote_key* key = detail::key_for(*p_, rb);
    return fabrix::detail::import_into(
        p_->imports, key ? std::optional(detail::imported_region{*key, rb.address, rb.epoch}) : std::nullopt, "ofi");
  }
  status release_key(import_ref ref) { return fabrix::detail::release_from(p_->imports, ref); }

  // For tests and diagnostics only: posts a write of `src` to the peer's raw
  // libfabric address `target` with key `key`, bypassing every fabrix check
  // (seal, range, rights). The target's provider must refuse what is not
  // registered; the outcome arrives as the completion of `token`.
  status post_unchecked_write(const local_slice& src, std::uint64_t target, std::uint64_t key, std::uint64_t token) {
    detail::domain_state& d = *p_->dom;
    if (p_->failed) return status::peer_unreachable;
    detail::op_slot* op = detail::take_slot(d, false);
    if (op == nullptr) return status::again;
    const operation o = op::write(src, remote_slice{}, token);
    detail::fill_slot(d, *p_, op, o, detail::target{});
    op->raddr = target;
    op->rkey = key;
    return detail::post_slot(*p_, op);
  }
};

}  // namespace detail
}  // namespace fabrix::ofi
