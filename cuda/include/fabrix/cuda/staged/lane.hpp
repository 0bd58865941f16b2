// One staged operation in flight: a user operation whose local memory is
// cuda_device, moved through this lane's `depth` bounce slots by a
// staging_pipeline and the network provider P's own operations ("inner"
// operations) on those slots.
//
//   write / send            device → slot (engine) → inner write / send from the slot
//   write_with_imm          device → the lane's slots (at most depth chunks,
//                           contiguous) → one inner write_with_imm of them
//                           all, so the target's notification reports the
//                           whole write and follows all of its data
//   read                    inner read into a slot → slot → device (engine)
//   fetch_add/compare_swap  inner atomic into a slot → 8 bytes → device
//   recv                    inner recv into slot 0 → the bytes received → device
//
// The lane completes the user operation once: after every chunk went through
// (or the first error of an engine copy or an inner operation), after every
// inner operation it posted has completed and no engine copy still runs on
// its slots, so a slot is never reused while something touches it.
//
// Inner operations carry flag_staging in their flags and a token naming
// (generation, lane, slot); a completion of an earlier generation (an
// operation the lane gave up when its endpoint went away) is ignored.
// Single-threaded, like its domain. No allocation after construction.
#pragma once

#include <fabrix/completion.hpp>
#include <fabrix/concepts.hpp>
#include <fabrix/cuda/staged/engine.hpp>
#include <fabrix/cuda/staging.hpp>
#include <fabrix/detail/completion_ring.hpp>
#include <fabrix/local_slice.hpp>
#include <fabrix/operation.hpp>

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

namespace fabrix::cuda::detail {

// completion::flags bit of the adapter's inner operations (fabrix::detail's
// flag_awaited is bit 0; providers copy operation::flags into completions).
inline constexpr std::uint8_t flag_staging = 0x40;
inline constexpr unsigned whole_slot = 0xff;  // the one inner op of a write_with_imm

inline constexpr std::uint64_t make_token(std::uint64_t gen, unsigned lane, unsigned slot) noexcept {
  return (gen << 24) | (static_cast<std::uint64_t>(lane & 0xffff) << 8) | (slot & 0xff);
}
inline constexpr unsigned token_lane(std::uint64_t t) noexcept { return static_cast<unsigned>((t >> 8) & 0xffff); }
inline constexpr unsigned token_slot(std::uint64_t t) noexcept { return static_cast<unsigned>(t & 0xff); }
inline constexpr std::uint64_t token_gen(std::uint64_t t) noexcept { return t >> 24; }

template <provider P, class E>
class lane {
 public:
  // `slots`: this lane's depth × chunk bytes of the bounce buffer; `bounce`:
  // a slice of the whole registered bounce buffer (descriptor, owner, provider).
  lane(E& engine, unsigned index, std::span<std::byte> slots, std::size_t chunk, unsigned depth,
       const local_slice& bounce)
      : eng_{&engine, index * depth},
        pipe_(eng_, slots, chunk, depth),
        index_(index),
        depth_(depth),
        slots_(slots),
        bounce_(bounce),
        ready_(depth) {
    pending_.reserve(depth);
  }
  lane(const lane&) = delete;
  lane& operator=(const lane&) = delete;

  bool busy() const noexcept { return busy_; }
  std::uint64_t generation() const noexcept { return gen_; }
  const typename P::endpoint_impl* endpoint() const noexcept { return ep_; }

  // Takes `o` (validated; one local slice of cuda_device memory, length > 0;
  // send/recv/atomics at most one chunk) for endpoint `ep`.
  // `peer_id`: the endpoint's, for a recv's completion::peer.
  void start(const operation& o, typename P::endpoint_impl* ep, std::uint64_t gen, std::uint32_t peer_id = 0) {
    busy_ = true;
    peer_id_ = peer_id;
    op_ = o;
    op_.gather = {};
    // Chunks are posted after start() returns, when the caller's
    // remote_buffer or remote_key may be gone: the lane keeps its own copy.
    if (o.remote.key != nullptr) {
      remote_key_ = *o.remote.key;
      op_.remote.key = &remote_key_;
    } else if (o.remote.buffer != nullptr) {
      remote_buffer_ = *o.remote.buffer;
      op_.remote.buffer = &remote_buffer_;
    }
    ep_ = ep;
    gen_ = gen;
    device_ = o.local.address;
    length_ = o.local.length;
    inner_out_ = 0;
    err_ = status::ok;
    native_ = 0;
    whole_posted_ = false;
    recv_posted_ = recv_done_ = false;
    received_ = 0;
    final_ = status::ok;
    pending_.clear();
    if (op_.code == opcode::recv) return;  // the pipeline starts when the message is in
    const bool out = op_.code == opcode::write || op_.code == opcode::write_with_imm || op_.code == opcode::send;
    if (status s = pipe_.start(out ? staging_direction::outbound : staging_direction::inbound, device_, length_);
        s != status::ok)
      err_ = s;
  }

  // A completion of one of this lane's inner operations (current generation).
  void on_inner(const completion& c) {
    if (inner_out_ > 0) --inner_out_;
    const unsigned slot = token_slot(c.token);
    if (op_.code == opcode::recv && c.status == status::truncated) {
      // The message was longer than the user's buffer: deliver what fits.
    } else if (c.status != status::ok) {
      fail(c.status, c.native_code);
      return;
    }
    if (slot == whole_slot) {
      for (const auto& ch : pending_)
        if (err_ == status::ok && pipe_.transfer_done(ch.slot) != status::ok) fail(status::provider_error, 0);
      pending_.clear();
      return;
    }
    if (op_.code == opcode::recv) {
      recv_done_ = true;
      final_ = c.status;
      // Truncated: the inner buffer is exactly as long as the user's and
      // holds the message's first bytes (the core contract), so all of it
      // goes to the device, whatever byte count P reported.
      received_ = c.status == status::truncated ? length_ : std::min<std::uint64_t>(c.bytes, length_);
      if (status s = pipe_.start(staging_direction::inbound, device_, received_); s != status::ok) fail(s, 0);
      return;
    }
    if (err_ == status::ok && pipe_.transfer_done(slot) != status::ok) fail(status::provider_error, 0);
  }

  // The endpoint is going away: stop posting, forget inner operations still
  // out (their late completions carry an old generation), fail the operation.
  void detach() noexcept {
    ep_ = nullptr;
    inner_out_ = 0;
    fail(status::canceled, 0);
  }

  // Moves the operation forward; pushes its completion to `done` and frees
  // the lane when it is finished. Returns true when it finished.
  bool advance(fabrix::detail::completion_ring& done) {
    if (!busy_) return false;
    if (err_ == status::ok && ep_ != nullptr) step();
    if (err_ == status::ok && pipe_.error() != status::ok) fail(pipe_.error(), 0);
    if (!finished()) return false;
    completion c{};
    c.token = op_.token;
    c.op = op_.code;
    c.flags = op_.flags;
    c.imm = op_.code == opcode::write_with_imm ? op_.imm : 0;
    c.status = err_ != status::ok ? err_ : final_;
    c.native_code = native_;
    // A truncated recv: received_ is the buffer's length (the inner recv's
    // buffer is exactly as long), which holds the message's first bytes.
    c.bytes = err_ != status::ok ? 0 : op_.code == opcode::recv ? received_ : length_;
    c.peer = op_.code == opcode::recv ? peer_id_ : 0;
    done.push(c);
    busy_ = false;
    ep_ = nullptr;
    return true;
  }

  // Whether an engine copy of this lane may still be running (wait() must
  // not sleep on the network alone then).
  bool copying() noexcept {
    for (unsigned s = 0; s < depth_; ++s)
      if (eng_.copy_state(s) == status::in_progress) return true;
    return false;
  }

 private:
  void fail(status s, std::int32_t native) noexcept {
    if (err_ == status::ok) {
      err_ = s;
      native_ = native;
    }
  }

  bool finished() noexcept {
    if (inner_out_ != 0) return false;
    if (err_ != status::ok) return !copying();
    if (op_.code == opcode::recv && !recv_done_) return false;
    return pipe_.finished();
  }

  local_slice slot_slice(std::byte* p, std::uint64_t n) const noexcept {
    local_slice s = bounce_;
    s.address = p;
    s.length = n;
    return s;
  }

  // Posts one inner operation; false when it must wait (again) or failed.
  bool post(operation& in) {
    std::size_t posted = 0;
    const status s = ep_->post(std::span<const operation>(&in, 1), posted);
    if (s == status::again) return false;
    if (s != status::ok) {
      fail(s, 0);
      return false;
    }
    ++inner_out_;
    return true;
  }

  void step() {
    if (op_.code == opcode::recv && !recv_done_) {
      if (recv_posted_) return;
      operation in{.code = opcode::recv, .local = slot_slice(slots_.data(), length_)};
      in.token = make_token(gen_, index_, 0);
      in.flags = flag_staging;
      recv_posted_ = post(in);
      return;
    }
    // Chunks that are the provider's turn, after those not posted yet.
    if (pending_.size() < depth_) {
      const std::size_t n = pipe_.progress(std::span<staging_chunk>(ready_).first(depth_ - pending_.size()));
      pending_.insert(pending_.end(), ready_.begin(), ready_.begin() + static_cast<std::ptrdiff_t>(n));
    }
    if (op_.code == opcode::recv) {
      // The message is in slot 0 already: hand the slots straight back.
      for (const auto& ch : pending_)
        if (pipe_.transfer_done(ch.slot) != status::ok) fail(status::provider_error, 0);
      pending_.clear();
      (void)pipe_.progress({});  // notices finished device copies
      return;
    }
    if (op_.code == opcode::write_with_imm) {
      // One inner write_with_imm over the contiguous slots, once every chunk
      // is in (length <= depth x chunk, checked at post): the target's
      // notification then reports the whole write, after all of its data.
      if (whole_posted_ || pending_.size() != pipe_.chunks()) return;
      operation in{.code = opcode::write_with_imm, .local = slot_slice(slots_.data(), length_), .remote = op_.remote};
      in.token = make_token(gen_, index_, whole_slot);
      in.flags = flag_staging;
      in.imm = op_.imm;
      whole_posted_ = post(in);
      return;
    }
    std::size_t sent = 0;
    while (sent < pending_.size() && err_ == status::ok) {
      const staging_chunk& ch = pending_[sent];
      operation in{.code = op_.code};
      in.local = slot_slice(ch.bounce, ch.length);
      in.remote = remote_slice{op_.remote.buffer, op_.remote.offset + ch.offset, ch.length, op_.remote.key};
      in.token = make_token(gen_, index_, ch.slot);
      in.flags = flag_staging;
      in.operand = op_.operand;
      in.compare = op_.compare;
      if (op_.code == opcode::send) in.remote = {};
      if (!post(in)) break;
      ++sent;
    }
    pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(sent));
    if (op_.code != opcode::write && op_.code != opcode::write_with_imm && op_.code != opcode::send)
      (void)pipe_.progress({});  // inbound: notices finished device copies
  }

  fabrix::cuda::detail::lane_engine<E> eng_;
  staging_pipeline<lane_engine<E>> pipe_;
  unsigned index_;
  unsigned depth_;
  std::span<std::byte> slots_;
  local_slice bounce_;
  std::vector<staging_chunk> ready_;    // depth entries, filled by progress()
  std::vector<staging_chunk> pending_;  // handed out, not posted yet (capacity depth)

  bool busy_ = false;
  operation op_{};
  remote_buffer remote_buffer_{};  // op_'s target, when it names a remote_buffer
  remote_key remote_key_{};        // op_'s target, when it names an imported key
  typename P::endpoint_impl* ep_ = nullptr;
  std::uint64_t gen_ = 0;
  std::byte* device_ = nullptr;
  std::uint64_t length_ = 0;
  unsigned inner_out_ = 0;
  status err_ = status::ok;
  std::int32_t native_ = 0;
  bool whole_posted_ = false;
  bool recv_posted_ = false;
  bool recv_done_ = false;
  std::uint64_t received_ = 0;
  status final_ = status::ok;
  std::uint32_t peer_id_ = 0;  // the endpoint's, for a recv's completion
};

}  // namespace fabrix::cuda::detail
