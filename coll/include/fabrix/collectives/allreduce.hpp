// fabrix::coll::allreduce — every rank ends with the element-wise reduction
// of all ranks' inputs. Ring algorithm (reduce-scatter then allgather,
// ring.hpp); each rank sends and receives 2(n-1)/n of the data. Any count,
// including counts not divisible by the number of ranks. Small vectors
// (options::direct_allreduce_bytes) go in one hop instead (allreduce_direct).
#pragma once

#include <fabrix/collectives/local_kernels.hpp>
#include <fabrix/collectives/reduce.hpp>
#include <fabrix/collectives/ring.hpp>
#include <fabrix/collectives/zero_copy.hpp>

#include <algorithm>
#include <span>

namespace fabrix::coll {

namespace detail {

// Small vectors: one hop. Every rank writes its input to every other rank's
// channel, then reduces the n inputs in rank order (so every rank computes
// bit-identical floating-point results), holding the landed chunks until
// done. Precondition: the input fits one chunk.
template <provider P, element T, class K>
result<void> allreduce_direct(communicator<P>& c, K& k, std::span<const T> in, std::span<T> out, reduce_op op) {
  const int n = c.size(), me = c.rank();
  const std::size_t bytes = in.size_bytes();
  std::span<std::uint64_t> posted = c.work().first(static_cast<std::size_t>(n));
  std::span<std::uint64_t> landed = c.work().subspan(static_cast<std::size_t>(n), static_cast<std::size_t>(n));
  std::fill(posted.begin(), posted.end(), 0);
  std::fill(landed.begin(), landed.end(), 0);
  const std::byte* mine = nullptr;  // a send slot holding our input (stays intact during the call)
  int left = 2 * (n - 1);
  const auto until = c.deadline();
  while (left > 0) {
    bool moved = false;
    for (int i = 1; i < n; ++i) {
      const int p = (me + i) % n;
      if (!posted[p] && c.can_send(p)) {
        std::byte* slot = c.send_slot(p);
        k.copy(slot, in.data(), bytes);
        if (auto r = k.ready(); !r) return c.fail(r.error());
        if (auto r = c.post(p, bytes); !r) return r;
        if (mine == nullptr) mine = slot;
        posted[p] = 1;
        --left;
        moved = true;
      }
      std::size_t got = 0;
      if (!landed[p] && c.landed(p, got) != nullptr) {
        if (got != bytes) return c.size_mismatch(p, got, bytes);
        landed[p] = 1;
        --left;
        moved = true;
      }
    }
    if (auto r = c.advance(moved, until); !r) return r;
  }
  auto input = [&](int r) {
    std::size_t got = 0;
    return reinterpret_cast<const T*>(r == me ? mine : c.landed(r, got));
  };
  k.combine(out.data(), input(0), input(1), in.size(), op);
  for (int r = 2; r < n; ++r) k.combine(out.data(), out.data(), input(r), in.size(), op);
  if (auto r = k.ready(); !r) return c.fail(r.error());
  for (int p = 0; p < n; ++p)
    if (p != me) c.consume(p);
  return c.finish(until);
}

// The ring: reduce-scatter then allgather (ring.hpp). With registered
// buffers (zero_copy.hpp) chunks go out from `in` and `out` themselves,
// partial sums are formed in `out`, and the allgather half lands straight
// in the right neighbour's `out`; otherwise every chunk is copied through
// the slots.
template <provider P, element T, class K>
result<void> allreduce_ring(communicator<P>& c, K& k, std::span<const T> in, std::span<T> out, reduce_op op) {
  const int n = c.size();
  const auto s = schedule_for<T>(c, 0, 2 * static_cast<std::size_t>(n) - 2, in.size(), ring_schedule::layout::vector);
  const std::size_t last_reduce = static_cast<std::size_t>(n) - 2;
  zero_copy_io<P> io;  // nothing registered: the slots throughout
  const bool zero_copy = zero_copy_applies(c, in.size_bytes());
  if (zero_copy) find_registered(c, io, in.data(), in.size_bytes(), out.data(), out.size_bytes(), sizeof(T));
  const bool lands_in_out = io.out_lands;  // the left neighbour writes the allgather half into `out`
  auto produce = [&](std::size_t m, std::byte* slot) {
    if (io.in == nullptr) return copy_send_range(s, k, in.data())(m, slot);
    const auto [f, l] = s.send_range(m);
    return chunk_route{.from = io.input(f, l), .to = std::nullopt};
  };
  auto absorb = [&](std::size_t m, const std::byte* data, std::byte* next) {
    const auto [f, l] = s.recv_range(m);
    const std::size_t g = s.step(m);
    const std::size_t bytes = (l - f) * sizeof(T);
    const T* got = reinterpret_cast<const T*>(data);
    if (g < last_reduce) {  // a partial sum, passed on
      if (io.out == nullptr) {
        k.combine(reinterpret_cast<T*>(next), got, in.data() + f, l - f, op);
        return absorbed{};
      }
      k.combine(out.data() + f, got, in.data() + f, l - f, op);
      return absorbed{.as_is = false, .route = {.from = io.output(f, l), .to = std::nullopt}};
    }
    if (g == last_reduce) {  // this rank's finished segment: the first allgather message
      k.combine(out.data() + f, got, in.data() + f, l - f, op);
      if (io.out != nullptr)
        return absorbed{.as_is = false, .route = {.from = io.output(f, l), .to = io.right_output(f, l)}};
      k.copy(next, out.data() + f, bytes);
      return absorbed{.as_is = false, .route = {.from = std::nullopt, .to = io.right_output(f, l)}};
    }
    if (!lands_in_out) k.copy(out.data() + f, data, bytes);
    if (next == nullptr) return absorbed{};
    if (io.out != nullptr)
      return absorbed{.as_is = false, .route = {.from = io.output(f, l), .to = io.right_output(f, l)}};
    return absorbed{.as_is = true, .route = {.from = std::nullopt, .to = io.right_output(f, l)}};  // passed on as it is
  };
  if (!zero_copy) return run_ring(c, k, s, sizeof(T), produce, absorb);
  // Messages of the allgather half may go into the right neighbour's output.
  output_exchange side(c, io, in.size_bytes(), [&](std::size_t m) { return s.step(m) >= last_reduce + 1; });
  if (auto r = side.start(); !r) return r;
  return run_ring(c, k, s, sizeof(T), produce, absorb, side);
}

}  // namespace detail

// `out` may be `in` (in place); otherwise they must not overlap. Same count
// on every rank. `where`: the memory of `in` and `out`, which must be the
// communicator's (options::device).
template <provider P, element T>
result<void> allreduce(communicator<P>& c, std::span<const T> in, std::span<T> out, reduce_op op,
                       memory_location where = {}) {
  if (auto h = c.health(); !h) return h;
  if (in.size() != out.size())
    return unexpected(status::invalid_argument, "allreduce: input and output differ in size", "collectives");
  return detail::with_kernels(c, where, "allreduce", [&](auto& k) -> result<void> {
    if (c.size() == 1) {
      k.copy(out.data(), in.data(), in.size_bytes());
      return {};
    }
    if (in.empty()) return {};
    if (in.size_bytes() <= std::min(c.opts().direct_allreduce_bytes, c.opts().chunk_bytes))
      return detail::allreduce_direct(c, k, in, out, op);
    return detail::allreduce_ring(c, k, in, out, op);
  });
}

template <provider P, element T>
result<void> allreduce(communicator<P>& c, std::span<T> inout, reduce_op op, memory_location where = {}) {
  return allreduce(c, std::span<const T>(inout), inout, op, where);
}

}  // namespace fabrix::coll
