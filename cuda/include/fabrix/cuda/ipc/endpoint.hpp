// A cuda_ipc endpoint to one peer (the provider side of fabrix::queue_pair):
// an outgoing Unix socket link to the peer's domain and a CUDA stream on
// which all its copies and kernels run, in post order.
//
// Peer failure: when the peer's domain goes away its socket closes; pending
// receives and undelivered notifications then complete with
// peer_unreachable and later posts return peer_unreachable.
#pragma once

#include <fabrix/cuda/ipc/post.hpp>
#include <fabrix/cuda/ipc/progress.hpp>
#include <fabrix/cuda/ipc/state.hpp>
#include <fabrix/operation.hpp>

#include <memory>
#include <span>
#include <utility>

namespace fabrix::cuda::ipc {

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
    device_guard on(p_->dom->device);
    for (posted = 0; posted < ops.size(); ++posted) {
      if (status s = detail::post_one(*p_, ops[posted]); s != status::ok) return s;
    }
    return status::ok;
  }

  void set_default_options(op_options defaults) { p_->defaults = defaults; }
  std::uint64_t finished() const noexcept { return p_ ? p_->finished : 0; }

  // An imported key is the region's mapped address, resolved once (resolve:
  // owner, seal, handle; the mapping lives as long as the endpoint).
  result<import_ref> import_key(const remote_buffer& rb) {
    device_guard on(p_->dom->device);
    status why = status::ok;
    std::byte* base = detail::resolve(*p_, rb, why);
    if (base == nullptr)
      return unexpected(why, "import: not made by this peer, not device memory, or its seal or key is broken",
                        "cuda_ipc");
    auto ref = p_->imports.add(base);
    if (!ref) return unexpected(status::no_memory, "import: too many imported keys on this queue pair", "cuda_ipc");
    return *ref;
  }
  status release_key(import_ref ref) { return p_->imports.release(ref) ? status::ok : status::invalid_argument; }

  bool failed() const noexcept { return p_ && p_->failed; }
  cudaStream_t stream() const noexcept { return p_ ? p_->stream : nullptr; }

 private:
  // Waits for the stream, completes what is in flight (notifications that
  // cannot go out any more say canceled), cancels receives, closes the link
  // and, when no other endpoint reaches that domain, its mappings.
  void teardown() noexcept {
    if (!p_) return;
    detail::peer_state& p = *p_;
    detail::domain_state& d = *p.dom;
    device_guard on(d.device);
    if (p.stream) cudaStreamSynchronize(p.stream);
    while (detail::op_slot* op = p.inflight.pop_front()) {
      if (op->st == detail::stage::copying && cudaEventQuery(d.events[d.slot_index(op)]) != cudaSuccess)
        op->c.status = status::provider_error;
      if (op->c.op == opcode::write_with_imm && op->c.status == status::ok)
        op->c.status = p.failed ? status::peer_unreachable
                       : send_packet(p.out->fd.get(), packet_type::notify, op->c.imm, op->c.bytes) == status::ok
                           ? status::ok
                           : status::canceled;
      detail::finish(d, op);
    }
    while (detail::op_slot* r = p.recvs.pop_front()) {
      r->c.status = status::canceled;
      detail::finish(d, r);
    }
    std::erase(d.peers, &p);
    for (auto& l : d.links)
      if (l->peer == &p) l->peer = nullptr;
    std::erase_if(d.links, [&](const std::unique_ptr<detail::link>& l) { return l.get() == p.out; });
    const bool last = std::none_of(d.peers.begin(), d.peers.end(), [&](auto* q) { return q->nonce == p.nonce; });
    if (last) d.cache.release_owner(p.nonce);
    if (p.stream) cudaStreamDestroy(p.stream);
    p_.reset();
  }

  std::unique_ptr<detail::peer_state> p_;
};

}  // namespace fabrix::cuda::ipc
