// One peer's channel in a communicator: a send area here and a receive area
// at the peer (and the reverse), each of `slots` chunks, used as a ring.
// Chunk number k of the channel always uses slot k % slots on both sides.
//
// Flow control: the sender may post chunk k only when
//   - its send slot is free (the write of chunk k - slots completed here), and
//   - the peer has consumed chunk k - slots (credits: the peer's cumulative
//     consumed count arrives in credit notifications),
// so a fast sender never overwrites a chunk the receiver has not used.
// A consumed chunk may be held: its receive slot is the source of a write
// that forwards it on to another rank (ring.hpp), and goes back to the peer
// only when that write has completed here. Credits carry `released`, the
// count of chunks whose slots are free again, so the peer never overwrites
// a slot that is still being read.
// Counters run for the communicator's whole life.
#pragma once

#include <fabrix/collectives/notify.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace fabrix::coll::detail {

// Which owed credits a progress pass returns (channel::owes_credit).
enum class credits { all, in_batches };

struct channel {
  // --- towards the peer ---
  std::uint64_t sent = 0;             // chunks posted
  std::uint64_t peer_consumed = 0;    // what its credits say it has consumed
  std::vector<std::uint8_t> sending;  // per send slot: a write is in flight
  // --- from the peer ---
  std::uint64_t consumed = 0;               // chunks used here
  std::uint64_t released = 0;               // of those, chunks whose slot is free again (in order)
  std::uint64_t credited = 0;               // `released` as last told to the peer
  std::vector<std::uint64_t> landed;        // per receive slot: chunk number + 1, 0 = empty
  std::vector<std::uint32_t> landed_bytes;  // per receive slot: bytes of that chunk
  std::vector<std::uint8_t> held;           // per receive slot: a forwarding write still reads it
  // --- liveness ---
  bool probing = false;  // a probe flush is in flight
  // Barrier notifications received from this peer, per dissemination round.
  std::uint64_t barrier_seen[32] = {};

  explicit channel(std::uint32_t slots) : sending(slots, 0), landed(slots, 0), landed_bytes(slots, 0), held(slots, 0) {}

  std::uint32_t slots() const noexcept { return static_cast<std::uint32_t>(sending.size()); }

  // The next chunk may be posted: its send slot is free and the peer has credit.
  bool can_send() const noexcept { return sending[sent % slots()] == 0 && sent - peer_consumed < slots(); }
  // Chunk `sent` was posted; returns its slot. `from_slot`: written from
  // this channel's send slot (busy until the write completes); else from
  // elsewhere (a forwarded receive slot), leaving the send slot free.
  std::uint32_t posted(bool from_slot = true) noexcept {
    const auto slot = static_cast<std::uint32_t>(sent % slots());
    if (from_slot) sending[slot] = 1;
    ++sent;
    return slot;
  }
  // The write from send slot `slot` completed here.
  void written(std::uint32_t slot) noexcept {
    if (slot < slots()) sending[slot] = 0;
  }

  // The next chunk to consume has landed; its size in `bytes`.
  bool next_landed(std::size_t& bytes) const noexcept {
    const auto slot = static_cast<std::uint32_t>(consumed % slots());
    if (landed[slot] != consumed + 1) return false;
    bytes = landed_bytes[slot];
    return true;
  }
  // Done with the next landed chunk; `hold`: its slot stays busy until release().
  void consume(bool hold = false) noexcept {
    const auto slot = static_cast<std::uint32_t>(consumed % slots());
    landed[slot] = 0;
    held[slot] = hold ? 1 : 0;
    ++consumed;
    advance();
  }
  // The forwarding write from receive slot `slot` completed.
  void release(std::uint32_t slot) noexcept {
    if (slot >= slots()) return;
    held[slot] = 0;
    advance();
  }

  // A data notification: chunk with low counter bits `low`, `bytes` long.
  // False when the peer broke the protocol (a chunk it had no credit for,
  // or larger than a slot).
  bool on_data(std::uint32_t low, std::size_t bytes, std::size_t chunk_bytes) noexcept {
    const std::uint64_t k = widen(consumed, low);
    if (k >= released + slots() || bytes > chunk_bytes) return false;
    landed[k % slots()] = k + 1;
    landed_bytes[k % slots()] = static_cast<std::uint32_t>(bytes);
    return true;
  }
  // A credit notification: the peer's consumed count, low bits `low`.
  void on_credit(std::uint32_t low) noexcept {
    const std::uint64_t v = widen(peer_consumed, low);
    if (v <= sent) peer_consumed = v;
  }
  // Credits to return: consumed chunks the peer has not been told of. In
  // batches: only once they are half the slots: a rank that is still
  // moving sends one credit per slots/2 chunks instead of one per chunk
  // (a notification each); a rank about to wait, or ending a call, sends
  // whatever it owes (communicator::progress), so no sender waits on a
  // credit held back by a rank that is itself waiting.
  bool owes_credit(credits which = credits::all) const noexcept {
    return released != credited && (which == credits::all || released - credited >= slots() / 2);
  }

  // "sent/acked, consumed/credited, N writes" for error messages.
  std::string describe() const {
    std::size_t busy = 0;
    for (auto b : sending) busy += b;
    return std::to_string(sent) + "/" + std::to_string(peer_consumed) + ", " + std::to_string(consumed) + "/" +
           std::to_string(released) + "/" + std::to_string(credited) + ", " + std::to_string(busy) + " writes";
  }

 private:
  void advance() noexcept {
    while (released < consumed && held[released % slots()] == 0) ++released;
  }
};

}  // namespace fabrix::coll::detail
