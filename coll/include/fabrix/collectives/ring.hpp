// The ring pipeline under allreduce, reduce_scatter and allgather.
//
// The data is cut into n segments (one per rank), each segment into chunks
// of at most chunk_bytes. A step moves one segment from every rank to its
// right neighbour; at step g rank r sends segment (r - g - shift) mod n and
// receives segment (r - g - 1 - shift) mod n. Reduce-scatter takes n-1
// steps, allgather n-1 more.
//
// Pipelining: the work is done in rounds of `lag` = slots/2 chunks per
// segment. Chunk messages on the channel to the right are numbered
//   m = (round * steps + step) * lag + chunk,
// the same numbers the right neighbour receives them under. Messages of
// step 0 come from local data; message m of a later step is produced from
// received message m - lag (reduced with local data, or copied). So up to
// `lag` chunks of a step are in flight while the next step starts, and
// with slots = 2 * lag credits the ring never waits on itself.
#pragma once

#include <fabrix/collectives/communicator.hpp>

#include <algorithm>
#include <cstddef>
#include <utility>

namespace fabrix::coll::detail {

// [first, last) of part i when `total` is split into `parts` near-equal parts.
constexpr std::pair<std::size_t, std::size_t> split(std::size_t total, std::size_t parts, std::size_t i) noexcept {
  const std::size_t base = total / parts;
  const std::size_t extra = total % parts;
  const std::size_t first = i * base + std::min(i, extra);
  return {first, first + base + (i < extra ? 1 : 0)};
}

struct ring_schedule {
  static constexpr std::size_t min_chunk_bytes = std::size_t{32} << 10;

  // vector: allreduce — the whole vector of `count` elements is cut into n
  //   segments per round. blocks: reduce_scatter/allgather — segment i is
  //   block i of `count` elements, [i*count, (i+1)*count).
  enum class layout { vector, blocks };

  int n = 1;
  int rank = 0;
  int shift = 0;
  std::size_t steps = 0;
  std::size_t lag = 1;
  std::size_t count = 0;
  std::size_t round_elems = 1;
  std::size_t rounds = 0;
  layout kind = layout::vector;

  ring_schedule(int ranks, int me, int shift_by, std::size_t step_count, std::size_t lag_chunks,
                std::size_t chunk_elems, std::size_t elems, layout l, std::size_t elem_size)
      : n(ranks), rank(me), shift(shift_by), steps(step_count), lag(lag_chunks), count(elems), kind(l) {
    // Pipeline mid-size data too: cut a segment into up to `lag` chunks
    // (smaller than chunk_elems, down to min_chunk_bytes) rather than send
    // one big chunk per step; only tiny data gets fewer chunks per step.
    const std::size_t segments = l == layout::vector ? static_cast<std::size_t>(n) : 1;
    const std::size_t min_chunk = std::clamp<std::size_t>(min_chunk_bytes / elem_size, 1, chunk_elems);
    const std::size_t needed = (count + segments * min_chunk - 1) / (segments * min_chunk);
    lag = std::clamp<std::size_t>(needed, 1, lag);
    round_elems = lag * chunk_elems * segments;
    rounds = (count + round_elems - 1) / round_elems;
  }

  std::size_t total() const noexcept { return rounds * steps * lag; }
  std::size_t round(std::size_t m) const noexcept { return m / (steps * lag); }
  std::size_t step(std::size_t m) const noexcept { return (m / lag) % steps; }
  std::size_t chunk(std::size_t m) const noexcept { return m % lag; }
  int segment(std::size_t g, int extra) const noexcept {
    const long long s = (static_cast<long long>(rank) - static_cast<long long>(g) - shift - extra) % n;
    return static_cast<int>(s < 0 ? s + n : s);
  }
  int send_segment(std::size_t g) const noexcept { return segment(g, 0); }
  int recv_segment(std::size_t g) const noexcept { return segment(g, 1); }

  // Element range [first, last) of chunk j of segment `seg` in round c,
  // as offsets into the whole vector (blocks: into the n*count elements).
  std::pair<std::size_t, std::size_t> range(std::size_t c, int seg, std::size_t j) const noexcept {
    const std::size_t base = c * round_elems;
    const std::size_t len = std::min(round_elems, count - base);
    if (kind == layout::vector) {
      const auto [sf, sl] = split(len, static_cast<std::size_t>(n), static_cast<std::size_t>(seg));
      const auto [cf, cl] = split(sl - sf, lag, j);
      return {base + sf + cf, base + sf + cl};
    }
    const auto [cf, cl] = split(len, lag, j);
    const std::size_t block = static_cast<std::size_t>(seg) * count;
    return {block + base + cf, block + base + cl};
  }
  std::pair<std::size_t, std::size_t> send_range(std::size_t m) const noexcept {
    return range(round(m), send_segment(step(m)), chunk(m));
  }
  std::pair<std::size_t, std::size_t> recv_range(std::size_t m) const noexcept {
    return range(round(m), recv_segment(step(m)), chunk(m));
  }
};

// The schedule of a ring collective on `c` over `count` elements of T:
// `steps` steps, segments shifted by `shift_by`, pipelined over the
// communicator's slots (slots/2 chunks in flight) and chunk size.
template <class T, provider P>
ring_schedule schedule_for(const communicator<P>& c, int shift_by, std::size_t steps, std::size_t count,
                           ring_schedule::layout l) {
  return ring_schedule(c.size(), c.rank(), shift_by, steps, c.opts().slots / 2, c.opts().chunk_bytes / sizeof(T), count,
                       l, sizeof(T));
}

// What absorb (run_ring) did with a received message: `as_is`: the next
// message is this one unchanged, for the ring to pass on; `route`: where the
// next message is written from and to (mesh.hpp; default: its send slot
// into the right neighbour's receive slot).
struct absorbed {
  bool as_is = false;
  chunk_route route{};
};

// run_ring's side hook when there is nothing besides the ring.
struct no_side {
  result<bool> poll() const { return false; }
  bool ready(std::size_t) const noexcept { return true; }
};

// run_ring's producer for messages built from local data: copies message
// m's send range of `src` into its send slot. `s` and `k` must outlive it.
template <class T, class K>
auto copy_send_range(const ring_schedule& s, K& k, const T* src) {
  return [&s, &k, src](std::size_t m, std::byte* slot) {
    const auto [f, l] = s.send_range(m);
    k.copy(slot, src + f, (l - f) * sizeof(T));
    return chunk_route{};
  };
}

// Runs the schedule on `c`, elements of `elem_size` bytes, with the kernel
// set `k` (local_kernels.hpp): produce and absorb enqueue their work on it,
// and the ring waits for it (k.ready()) before it posts a filled send slot
// or hands a read receive slot back.
//   produce(m, slot): fills the send slot of step-0 message m from local
//     data, or returns a route that names where else it is.
//   absorb(m, data, next): consumes received message m (`data`: its receive
//     slot, unless the sender's route put it elsewhere); `next` is the send
//     slot of message m + lag (its successor one step later), or nullptr
//     when m is of the last step. Returns `absorbed`; with as_is, absorb
//     leaves `next` alone, and the ring copies m there, or with
//     options::forward_received (and no route) writes it on from its
//     receive slot (communicator::forward, no copy).
//   side: messages the ring waits on besides its own (zero_copy.hpp's
//     output_exchange): side.poll() handles any that arrived (result<bool>:
//     anything moved) and runs first in every pass, so a side message ahead
//     of ring data on a channel is always taken first; message m is sent
//     only once side.ready(m).
template <provider P, class K, class Produce, class Absorb, class Side = no_side>
result<void> run_ring(communicator<P>& c, K& k, const ring_schedule& s, std::size_t elem_size, Produce&& produce,
                      Absorb&& absorb, Side&& side = Side{}) {
  const int right = (c.rank() + 1) % c.size();
  const int left = (c.rank() - 1 + c.size()) % c.size();
  const std::size_t total = s.total();
  const auto until = c.deadline();
  std::size_t next_send = 0;
  std::size_t next_recv = 0;
  auto bytes_of = [&](std::pair<std::size_t, std::size_t> r) { return (r.second - r.first) * elem_size; };
  while (next_send < total || next_recv < total) {
    auto polled = side.poll();
    if (!polled) return unexpected(std::move(polled).error());
    bool moved = *polled;
    while (next_send < total && s.step(next_send) == 0 && c.can_send(right) && side.ready(next_send)) {
      const chunk_route route = produce(next_send, c.send_slot(right));
      if (auto r = k.ready(); !r) return c.fail(r.error());
      if (auto r = c.post(right, bytes_of(s.send_range(next_send)), route); !r) return r;
      ++next_send;
      moved = true;
    }
    while (next_recv < total) {
      std::size_t got = 0;
      const std::byte* data = c.landed(left, got);
      if (data == nullptr) break;
      const std::size_t want = bytes_of(s.recv_range(next_recv));
      if (got != want) return c.size_mismatch(left, got, want);
      const bool forwards = s.step(next_recv) + 1 < s.steps;
      if (forwards && (next_send != next_recv + s.lag || !c.can_send(right) || !side.ready(next_send))) break;
      std::byte* next = forwards ? c.send_slot(right) : nullptr;
      const absorbed done = absorb(next_recv, data, next);
      const bool forward = forwards && done.as_is && c.opts().forward_received && !done.route.from && !done.route.to;
      if (forwards && done.as_is && !forward) k.copy(next, data, want);
      if (auto r = k.ready(); !r) return c.fail(r.error());
      if (forward) {
        if (auto r = c.forward(left, right, want); !r) return r;
        ++next_send;
      } else {
        c.consume(left);
        if (forwards) {
          if (auto r = c.post(right, want, done.route); !r) return r;
          ++next_send;
        }
      }
      ++next_recv;
      moved = true;
    }
    if (auto r = c.advance(moved, until); !r) return r;
  }
  return c.finish(until);
}

}  // namespace fabrix::coll::detail
