// A cuda_ipc endpoint to one peer (the provider side of fabrix::queue_pair):
// an outgoing Unix socket link to the peer's domain and a CUDA stream on
// which all its copies and kernels run, in post order.
//
// Peer failure: when the peer's domain goes away its socket closes; pending
// receives and undelivered notifications then complete with
// peer_unreachable and later posts return peer_unreachable.
#pragma once

#include <fabrix/cuda/ipc/detail/post.hpp>
#include <fabrix/cuda/ipc/detail/progress.hpp>
#include <fabrix/cuda/ipc/detail/state.hpp>
#include <fabrix/cuda/ipc/native.hpp>
#include <fabrix/detail/endpoint_base.hpp>
#include <fabrix/detail/import_table.hpp>
#include <fabrix/operation.hpp>

#include <memory>
#include <span>
#include <utility>

namespace fabrix::cuda::ipc {

namespace detail {
struct close_endpoint {
  void operator()(std::unique_ptr<peer_state>&& owned) const noexcept;
};

class endpoint_impl : public fabrix::detail::endpoint_base<detail::peer_state, detail::close_endpoint> {
 public:
  cuda_ipc::native_queue_pair native() const noexcept { return {p_ ? p_->stream : nullptr}; }
  using endpoint_base::endpoint_base;

  status post(std::span<const operation> ops, std::size_t& posted) {
    device_guard on(p_->dom->device);
    return post_each(ops, posted, detail::post_one);
  }

  // An imported key is the region's mapped address, resolved once (resolve:
  // owner, seal, handle; the mapping lives as long as the endpoint).
  result<import_ref> import_key(const remote_buffer& rb) {
    device_guard on(p_->dom->device);
    status why = status::ok;
    std::byte* base = detail::resolve(*p_, rb, why);
    return fabrix::detail::import_into(p_->imports, base ? std::optional(base) : std::nullopt, "cuda_ipc", why,
                                       "not made by this peer, not device memory, or its seal or key is broken");
  }
  status release_key(import_ref ref) { return fabrix::detail::release_from(p_->imports, ref); }

  cudaStream_t stream() const noexcept { return p_ ? p_->stream : nullptr; }
};

// Waits for the stream, completes what is in flight (notifications that
// cannot go out any more say canceled), cancels receives, closes the link
// and, when no other endpoint reaches that domain, its mappings.
inline void close_endpoint::operator()(std::unique_ptr<peer_state>&& owned) const noexcept {
  peer_state& p = *owned;
  domain_state& d = *p.dom;
  device_guard on(d.device);
  if (p.stream) cudaStreamSynchronize(p.stream);
  while (detail::op_slot* op = p.inflight.pop_front()) {
    // The stream is idle: its sticky error (or the covering event's) is the op's.
    const cudaError_t e = op->event == detail::no_event ? cudaStreamQuery(p.stream)
                                                        : cudaEventQuery(d.events[static_cast<std::size_t>(op->event)]);
    if (op->st == detail::stage::copying && e != cudaSuccess) op->c.status = status::provider_error;
    if (op->c.op == opcode::write_with_imm && op->c.status == status::ok)
      op->c.status = p.failed ? status::peer_unreachable
                     : send_on(*p.out, packet_type::notify, op->c.imm, op->c.bytes) == status::ok ? status::ok
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
}

}  // namespace detail

}  // namespace fabrix::cuda::ipc
