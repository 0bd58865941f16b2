// fabrix::coll::alltoall / alltoallv — rank r sends a piece of its input to
// every rank and receives one from every rank. Every pair of ranks talks
// over its own channel (channel.hpp), chunk by chunk, all at once: a rank
// sends to whichever peer has credit and drains whichever peer has data, so
// no schedule can deadlock. Each rank sends (n-1)/n of its input. Pieces of
// registered buffers (communicator::register_memory) skip the copies
// through the slots (zero_copy.hpp).
#pragma once

#include <fabrix/collectives/communicator.hpp>
#include <fabrix/collectives/local_kernels.hpp>
#include <fabrix/collectives/zero_copy.hpp>

#include <cstddef>
#include <span>
#include <type_traits>

namespace fabrix::coll {

namespace detail {

// The exchange itself, arguments checked, with kernel set `k`.
//
// Zero copy (zero_copy.hpp): a piece that qualifies (zero_copy_piece, the
// same answer at both ends) goes out from `in` itself when `in` is
// registered, and straight into the receiver's `out` when that is. The
// receiver says which, in an output message that it posts on the channel
// ahead of its own data; the sender holds that piece's chunks until it has
// read it.
template <provider P, class T, class K>
result<void> alltoallv_run(communicator<P>& c, K& k, std::span<const T> in, std::span<const std::size_t> send_counts,
                           std::span<const std::size_t> send_displs, std::span<T> out,
                           std::span<const std::size_t> recv_counts, std::span<const std::size_t> recv_displs) {
  const std::size_t n = static_cast<std::size_t>(c.size());
  const std::size_t me = static_cast<std::size_t>(c.rank());
  k.copy(out.data() + recv_displs[me], in.data() + send_displs[me], send_counts[me] * sizeof(T));
  if (n == 1) return {};

  const std::size_t chunk = c.opts().chunk_bytes / sizeof(T);
  auto chunks = [chunk](std::size_t count) { return (count + chunk - 1) / chunk; };
  zero_copy_io<P> io;
  find_registered(c, io, in.data(), in.size_bytes(), out.data(), out.size_bytes(), sizeof(T));
  auto direct = [&](std::size_t count) { return zero_copy_piece(c, count * sizeof(T)); };
  std::span<std::uint64_t> sent = c.work().first(n);
  std::span<std::uint64_t> received = c.work().subspan(n, n);
  std::span<std::uint64_t> told = c.work().subspan(4 * n, n);   // our output message is out to p (or not due)
  std::span<std::uint64_t> heard = c.work().subspan(5 * n, n);  // p's output message is read (or not due)
  std::span<peer_output> theirs = c.peer_outputs();
  std::size_t left = 0;
  for (std::size_t p = 0; p < n; ++p) {
    sent[p] = 0;
    received[p] = 0;
    told[p] = p == me || !direct(recv_counts[p]);
    heard[p] = p == me || !direct(send_counts[p]);
    theirs[p].registered = false;
    if (p != me) left += chunks(send_counts[p]) + chunks(recv_counts[p]) + !told[p] + !heard[p];
  }
  const auto until = c.deadline();
  while (left > 0) {
    bool moved = false;
    for (std::size_t i = 1; i < n; ++i) {
      const std::size_t p = (me + i) % n;
      const int peer = static_cast<int>(p);
      if (!told[p] && c.can_send(peer)) {
        const std::size_t at = io.out_at + recv_displs[p] * sizeof(T);
        if (auto r = post_output_message(c, peer, io.out_lands ? io.out : nullptr, at, recv_counts[p] * sizeof(T)); !r)
          return r;
        told[p] = 1;
        --left;
        moved = true;
      }
      while (told[p] && heard[p] && sent[p] < chunks(send_counts[p]) && c.can_send(peer)) {
        const std::size_t first = sent[p] * chunk;
        const std::size_t len = std::min(chunk, send_counts[p] - first);
        chunk_route route{};
        if (direct(send_counts[p])) {
          if (io.in != nullptr) route.from = io.input(send_displs[p] + first, send_displs[p] + first + len);
          if (theirs[p].registered) route.to = theirs[p].slice(first * sizeof(T), len * sizeof(T));
        }
        if (!route.from) k.copy(c.send_slot(peer), in.data() + send_displs[p] + first, len * sizeof(T));
        if (auto r = k.ready(); !r) return c.fail(r.error());
        if (auto r = c.post(peer, len * sizeof(T), route); !r) return r;
        ++sent[p];
        --left;
        moved = true;
      }
      std::size_t got = 0;
      if (const std::byte* m = heard[p] ? nullptr : c.landed(peer, got); m != nullptr) {
        const std::size_t piece = send_counts[p] * sizeof(T);
        if (auto r = read_output_message(c, peer, std::span<const std::byte>(m, got), piece, theirs[p]); !r) return r;
        c.consume(peer);
        heard[p] = 1;
        --left;
        moved = true;
      }
      // Chunks of a piece we said lands in our output are already there.
      const bool lands_in_out = io.out_lands && direct(recv_counts[p]);
      while (heard[p] && received[p] < chunks(recv_counts[p])) {
        const std::byte* data = c.landed(peer, got);
        if (data == nullptr) break;
        const std::size_t first = received[p] * chunk;
        const std::size_t len = std::min(chunk, recv_counts[p] - first);
        if (got != len * sizeof(T)) return c.size_mismatch(peer, got, len * sizeof(T));
        if (!lands_in_out) k.copy(out.data() + recv_displs[p] + first, data, got);
        if (auto r = k.ready(); !r) return c.fail(r.error());
        c.consume(peer);
        ++received[p];
        --left;
        moved = true;
      }
    }
    if (auto r = c.advance(moved, until); !r) return r;
  }
  return c.finish(until);
}

}  // namespace detail

// Counts and displacements are in elements, one per rank. The piece for
// rank p is in[send_displs[p], + send_counts[p]); the piece from rank p
// lands at out[recv_displs[p], + recv_counts[p]). recv_counts[p] on this
// rank must equal send_counts[this rank] on rank p. `in` and `out` must not
// overlap.
template <provider P, class T>
requires std::is_trivially_copyable_v<T> result<void> alltoallv(
    communicator<P>& c, std::span<const T> in, std::span<const std::size_t> send_counts,
    std::span<const std::size_t> send_displs, std::span<T> out, std::span<const std::size_t> recv_counts,
    std::span<const std::size_t> recv_displs, memory_location where = {}) {
  if (auto h = c.health(); !h) return h;
  const std::size_t n = static_cast<std::size_t>(c.size());
  auto bad = [](const char* why) { return unexpected(status::invalid_argument, why, "collectives"); };
  if (send_counts.size() != n || send_displs.size() != n || recv_counts.size() != n || recv_displs.size() != n)
    return bad("alltoallv: counts and displacements need one entry per rank");
  if (sizeof(T) > c.opts().chunk_bytes) return bad("alltoallv: element larger than chunk_bytes");
  for (std::size_t p = 0; p < n; ++p) {
    if (send_displs[p] > in.size() || send_counts[p] > in.size() - send_displs[p])
      return bad("alltoallv: a send piece lies outside the input");
    if (recv_displs[p] > out.size() || recv_counts[p] > out.size() - recv_displs[p])
      return bad("alltoallv: a receive piece lies outside the output");
  }
  const std::size_t me = static_cast<std::size_t>(c.rank());
  if (send_counts[me] != recv_counts[me]) return bad("alltoallv: this rank's piece for itself differs in size");
  return detail::with_kernels(c, where, "alltoallv", [&](auto& k) {
    return detail::alltoallv_run(c, k, in, send_counts, send_displs, out, recv_counts, recv_displs);
  });
}

// Equal pieces: `in` and `out` hold size() blocks of `count` elements each,
// count = in.size() / size().
template <provider P, class T>
requires std::is_trivially_copyable_v<T> result<void> alltoall(communicator<P>& c, std::span<const T> in,
                                                               std::span<T> out, memory_location where = {}) {
  const std::size_t n = static_cast<std::size_t>(c.size());
  if (in.size() != out.size() || in.size() % n != 0)
    return unexpected(status::invalid_argument, "alltoall: input and output must both hold size() equal blocks",
                      "collectives");
  std::span<std::uint64_t> layout = c.work().subspan(2 * n, 2 * n);
  std::span<std::size_t> counts(reinterpret_cast<std::size_t*>(layout.data()), n);
  std::span<std::size_t> displs(reinterpret_cast<std::size_t*>(layout.data()) + n, n);
  for (std::size_t p = 0; p < n; ++p) {
    counts[p] = in.size() / n;
    displs[p] = p * (in.size() / n);
  }
  return alltoallv<P, T>(c, in, counts, displs, out, counts, displs, where);
}

}  // namespace fabrix::coll
