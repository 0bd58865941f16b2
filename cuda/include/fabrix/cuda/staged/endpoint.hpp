// A staged domain's endpoint: the inner provider's endpoint, plus the
// staging of operations whose local memory is staged device memory.
//
// post() walks the batch in order: runs of operations on host memory go to
// the inner endpoint in one call, untouched; an operation on staged device
// memory takes a lane (status::again when all lanes are busy — poll and post
// again; nothing queues without bound; a staged recv holds its lane until
// its message arrives). Refused with unsupported: a
// scatter-gather list that holds staged device memory, send/recv larger
// than one staging chunk (a message is one inner send), and write_with_imm
// larger than depth × chunk (it goes as one inner write_with_imm, so that the
// target's notification reports the whole write). A flush waits
// (status::again) while a staged operation posted earlier on this endpoint
// is still running, because its later chunks are not posted yet.
#pragma once

#include <fabrix/concepts.hpp>
#include <fabrix/cuda/staged/region.hpp>
#include <fabrix/cuda/staged/state.hpp>

#include <cstdint>
#include <memory>
#include <span>
#include <utility>

namespace fabrix::cuda::detail {

template <provider P, staging_engine E>
class staged_endpoint {
 public:
  // `peer_id`: what the completions of staged recvs posted here carry in
  // completion::peer (P fills it for everything else).
  staged_endpoint(staged_state<P, E>* d, typename P::endpoint_impl inner, std::uint32_t peer_id)
      : d_(d), inner_(std::make_unique<typename P::endpoint_impl>(std::move(inner))), peer_id_(peer_id) {}
  staged_endpoint(staged_endpoint&&) noexcept = default;
  staged_endpoint& operator=(staged_endpoint&& o) noexcept {
    if (this != &o) {
      close();
      d_ = o.d_;
      inner_ = std::move(o.inner_);
      peer_id_ = o.peer_id_;
    }
    return *this;
  }
  ~staged_endpoint() { close(); }

  status post(std::span<const operation> ops, std::size_t& posted) {
    posted = 0;
    std::size_t i = 0;
    while (i < ops.size()) {
      if (is_staged(ops[i])) {
        if (status s = start(ops[i]); s != status::ok) return s;
        ++posted;
        ++i;
        continue;
      }
      std::size_t j = i;
      while (j < ops.size() && !is_staged(ops[j])) {
        if (ops[j].code == opcode::flush && d_->busy_on(inner_.get())) break;
        ++j;
      }
      if (j == i) return status::again;  // a flush behind a running staged operation
      std::size_t n = 0;
      const status s = inner_->post(ops.subspan(i, j - i), n);
      posted += n;
      if (s != status::ok) return s;
      i = j;
    }
    return status::ok;
  }

  // Operations on host memory go to the inner endpoint as they are, with
  // these defaults; staged ones are always signaled (start()).
  void set_default_options(op_options defaults) { inner_->set_default_options(defaults); }
  std::uint64_t finished() const noexcept { return inner_->finished(); }
  // Keys are the inner endpoint's: staged chunks reach the same table.
  result<import_ref> import_key(const remote_buffer& rb) { return inner_->import_key(rb); }
  status release_key(import_ref ref) { return inner_->release_key(ref); }

  typename P::endpoint_impl& inner() noexcept { return *inner_; }

 private:
  bool is_staged(const operation& o) const noexcept {
    if (d_->path != gpu_path::staged || o.code == opcode::flush) return false;
    for (const auto& l : o.locals())
      if (l.descriptor == &staged_descriptor_tag) return true;
    return false;
  }

  status start(const operation& o) {
    if (!o.gather.empty()) return status::unsupported;  // no scatter-gather with staged device memory
    // Not yet for staged device memory: unsignaled operations and fences
    // (a lane is several inner operations; their order and count are its own).
    if (has(o.options, op_options::unsignaled) || has(o.options, op_options::fence)) return status::unsupported;
    const bool message = o.code == opcode::send || o.code == opcode::recv;
    if (message && o.local.length > d_->config.chunk) return status::unsupported;
    if (o.code == opcode::write_with_imm && o.local.length > d_->config.chunk * d_->config.depth)
      return status::unsupported;
    if (o.local.length == 0) {
      // Nothing to copy: the same operation on an empty slice of the bounce buffer.
      operation in = o;
      in.local.address = d_->bounce_memory->bytes().data();
      in.local.descriptor = d_->bounce_region->descriptor();
      std::size_t n = 0;
      return inner_->post(std::span<const operation>(&in, 1), n);
    }
    auto* l = d_->free_lane();
    if (l == nullptr) {
      d_->advance_all();  // a lane may just have finished
      if ((l = d_->free_lane()) == nullptr) return status::again;
    }
    l->start(o, inner_.get(), d_->next_gen++, peer_id_);
    ++d_->busy;
    if (l->advance(d_->done)) --d_->busy;
    return status::ok;
  }

  void close() noexcept {
    if (inner_) d_->detach(inner_.get());
  }

  staged_state<P, E>* d_;
  std::unique_ptr<typename P::endpoint_impl> inner_;
  std::uint32_t peer_id_ = 0;
};

}  // namespace fabrix::cuda::detail
