// fabrix::cuda::staging_pipeline<Engine> — moves a buffer a transport cannot
// touch (device memory) through N host bounce slots of `chunk` bytes each,
// so that copying chunk i+1 overlaps the transfer of chunk i.
//
//   outbound (device -> peer):  engine copies chunk i device -> slot i%N;
//                               the provider transfers the slot, then says
//                               transfer_done(slot); the slot is reused.
//   inbound  (peer -> device):  the provider fills slot i%N (a read or a
//                               receive), says transfer_done(slot); the engine
//                               copies it to the device; the slot is reused.
//
// The pipeline is a state machine with no threads and no allocation after
// construction: progress() starts what can start and returns the chunks that
// are the provider's turn, in order of their offset. Chunk i always uses slot
// i % N, so at most N chunks are in flight and chunks reach the wire in order.
//
// Engine (the copy engine: cuda::stream_copy_engine for real, a host memcpy
// engine in tests) provides, per slot, one asynchronous copy at a time:
//   status start_copy(unsigned slot, void* dst, const void* src, std::size_t n)
//   status copy_state(unsigned slot)   ok (done), in_progress, or an error
// The pipeline never calls start_copy on a slot whose copy is not done.
//
// Seam for providers (UCX, ofi, verbs) that register cuda_device memory as
// gpu_path::staged: register the bounce buffer (pinned host) once, and run one
// pipeline per large operation (see cuda/README.md).
// Needs no CUDA headers. Single-threaded.
#pragma once

#include <fabrix/status.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace fabrix::cuda {

// (clang-format 14 mangles requires-expressions)
// clang-format off
template <class E>
concept copy_engine = requires(E& e, unsigned slot, void* dst, const void* src, std::size_t n) {
  { e.start_copy(slot, dst, src, n) } -> std::same_as<status>;
  { e.copy_state(slot) } -> std::same_as<status>;
};
// clang-format on

enum class staging_direction : std::uint8_t { outbound, inbound };

// One chunk handed to the provider: move `length` bytes of `bounce` (the
// slot) to / from offset `offset` of the operation's remote range.
struct staging_chunk {
  std::size_t index = 0;
  std::size_t offset = 0;
  std::size_t length = 0;
  std::byte* bounce = nullptr;
  unsigned slot = 0;
};

template <copy_engine Engine>
class staging_pipeline {
 public:
  // `bounce` holds `slots` slots of `chunk` bytes; engine copies use slot ids
  // 0..slots-1. Preconditions: chunk > 0, slots > 0, bounce.size() >= chunk * slots.
  staging_pipeline(Engine& engine, std::span<std::byte> bounce, std::size_t chunk, unsigned slots)
      : engine_(&engine), bounce_(bounce), chunk_(chunk), state_(slots, slot_state::free) {}

  std::size_t chunk_size() const noexcept { return chunk_; }
  unsigned slots() const noexcept { return static_cast<unsigned>(state_.size()); }

  // Begins moving `length` bytes of `device` (read for outbound, written for
  // inbound). Refused (invalid_argument) while a previous run is unfinished
  // or when the bounce buffer is smaller than promised.
  status start(staging_direction dir, std::byte* device, std::size_t length) {
    if (!finished() || chunk_ == 0 || state_.empty() || bounce_.size() / chunk_ < state_.size())
      return status::invalid_argument;
    dir_ = dir;
    device_ = device;
    length_ = length;
    chunks_ = (length + chunk_ - 1) / chunk_;
    next_copy_ = next_handout_ = completed_ = 0;
    error_ = status::ok;
    for (auto& s : state_) s = slot_state::free;
    return status::ok;
  }

  // Advances copies; writes the chunks that are now the provider's turn into
  // `ready` (oldest first) and returns how many. Chunks that did not fit in
  // `ready` are returned by the next call.
  std::size_t progress(std::span<staging_chunk> ready) {
    if (error_ != status::ok) return 0;
    std::size_t n = 0;
    if (dir_ == staging_direction::outbound) {
      start_outbound_copies();
      // Hand out finished copies in chunk order.
      while (n < ready.size() && next_handout_ < next_copy_) {
        const unsigned s = slot_of(next_handout_);
        const status st = engine_->copy_state(s);
        if (st == status::in_progress) break;
        if (st != status::ok) return fail(st), n;
        state_[s] = slot_state::transferring;
        ready[n++] = chunk_at(next_handout_++);
      }
    } else {
      // Finished device copies free their slots (in order).
      while (completed_ < next_copy_) {
        const unsigned s = slot_of(completed_);
        if (state_[s] != slot_state::copying) break;
        const status st = engine_->copy_state(s);
        if (st == status::in_progress) break;
        if (st != status::ok) return fail(st), n;
        state_[s] = slot_state::free;
        ++completed_;
      }
      // Free slots go to the provider to be filled, in chunk order.
      while (n < ready.size() && next_handout_ < chunks_ && state_[slot_of(next_handout_)] == slot_state::free) {
        state_[slot_of(next_handout_)] = slot_state::transferring;
        ready[n++] = chunk_at(next_handout_++);
      }
      start_inbound_copies();
    }
    return n;
  }

  // The provider is done with `slot`: outbound, its bytes are on the wire and
  // the slot is free; inbound, its bytes have arrived and may go to the device.
  // Returns invalid_argument for a slot that was not handed out.
  status transfer_done(unsigned slot) {
    if (slot >= state_.size() || state_[slot] != slot_state::transferring) return status::invalid_argument;
    if (dir_ == staging_direction::outbound) {
      state_[slot] = slot_state::free;
      ++completed_;
      start_outbound_copies();
    } else {
      state_[slot] = slot_state::filled;
      start_inbound_copies();
    }
    return status::ok;
  }

  // Every chunk went through (or there was nothing to move).
  bool finished() const noexcept { return error_ != status::ok || completed_ == chunks_; }
  // ok, or the engine's error that stopped the run.
  status error() const noexcept { return error_; }
  std::size_t chunks() const noexcept { return chunks_; }
  std::size_t completed_chunks() const noexcept { return completed_; }
  // Chunks whose slot is busy (copying, with the provider, or filled).
  std::size_t in_flight() const noexcept {
    std::size_t n = 0;
    for (auto s : state_) n += s != slot_state::free;
    return n;
  }

 private:
  enum class slot_state : std::uint8_t { free, copying, transferring, filled };

  unsigned slot_of(std::size_t index) const noexcept { return static_cast<unsigned>(index % state_.size()); }
  std::byte* slot_memory(unsigned s) const noexcept { return bounce_.data() + static_cast<std::size_t>(s) * chunk_; }
  std::size_t length_of(std::size_t index) const noexcept {
    const std::size_t off = index * chunk_;
    return length_ - off < chunk_ ? length_ - off : chunk_;
  }
  staging_chunk chunk_at(std::size_t index) const noexcept {
    const unsigned s = slot_of(index);
    return {index, index * chunk_, length_of(index), slot_memory(s), s};
  }
  void fail(status st) noexcept { error_ = st; }

  // Outbound: copy device -> slot for the next chunks whose slot is free.
  void start_outbound_copies() {
    while (error_ == status::ok && next_copy_ < chunks_ && state_[slot_of(next_copy_)] == slot_state::free) {
      const unsigned s = slot_of(next_copy_);
      const status st = engine_->start_copy(s, slot_memory(s), device_ + next_copy_ * chunk_, length_of(next_copy_));
      if (st != status::ok) return fail(st);
      state_[s] = slot_state::copying;
      ++next_copy_;
    }
  }
  // Inbound: copy slot -> device for filled slots, in chunk order.
  void start_inbound_copies() {
    while (error_ == status::ok && next_copy_ < next_handout_ && state_[slot_of(next_copy_)] == slot_state::filled) {
      const unsigned s = slot_of(next_copy_);
      const status st = engine_->start_copy(s, device_ + next_copy_ * chunk_, slot_memory(s), length_of(next_copy_));
      if (st != status::ok) return fail(st);
      state_[s] = slot_state::copying;
      ++next_copy_;
    }
  }

  Engine* engine_;
  std::span<std::byte> bounce_;
  std::size_t chunk_;
  std::vector<slot_state> state_;
  staging_direction dir_ = staging_direction::outbound;
  std::byte* device_ = nullptr;
  std::size_t length_ = 0;
  std::size_t chunks_ = 0;
  std::size_t next_copy_ = 0;     // next chunk whose engine copy starts
  std::size_t next_handout_ = 0;  // next chunk handed to the provider
  std::size_t completed_ = 0;     // chunks fully through
  status error_ = status::ok;
};

// A copy engine over plain memcpy: copies at once and is always done. For
// tests (host memory standing in for device memory) and host-only builds.
struct host_copy_engine {
  status start_copy(unsigned, void* dst, const void* src, std::size_t n) noexcept {
    if (n) std::memcpy(dst, src, n);
    return status::ok;
  }
  status copy_state(unsigned) const noexcept { return status::ok; }
};

}  // namespace fabrix::cuda
