// fabrix::coll::allreduce — every rank ends with the element-wise reduction
// of all ranks' inputs. Ring algorithm (reduce-scatter then allgather,
// ring.hpp); each rank sends and receives 2(n-1)/n of the data. Any count,
// including counts not divisible by the number of ranks.
#pragma once

#include <fabrix/collectives/reduce.hpp>
#include <fabrix/collectives/ring.hpp>

#include <span>

namespace fabrix::coll {

// `out` may be `in` (in place); otherwise they must not overlap. Same count
// on every rank.
template <provider P, element T>
result<void> allreduce(communicator<P>& c, std::span<const T> in, std::span<T> out, reduce_op op,
                       memory_location where = {}) {
  using K = host_kernels;
  if (auto h = c.health(); !h) return h;
  if (auto r = detail::check_host(where, "allreduce"); !r) return r;
  if (in.size() != out.size())
    return unexpected(status::invalid_argument, "allreduce: input and output differ in size", "collectives");
  if (c.size() == 1) {
    K::copy(out.data(), in.data(), in.size_bytes());
    return {};
  }
  const int n = c.size();
  const detail::ring_schedule s(n, c.rank(), 0, 2 * static_cast<std::size_t>(n) - 2, c.opts().slots / 2,
                                c.opts().chunk_bytes / sizeof(T), in.size(), detail::ring_schedule::layout::vector);
  const std::size_t last_reduce = static_cast<std::size_t>(n) - 2;
  return detail::run_ring(
      c, s, sizeof(T),
      [&](std::size_t m, std::byte* slot) {
        const auto [f, l] = s.send_range(m);
        K::copy(slot, in.data() + f, (l - f) * sizeof(T));
      },
      [&](std::size_t m, const std::byte* data, std::byte* next) {
        const auto [f, l] = s.recv_range(m);
        const std::size_t g = s.step(m);
        const T* got = reinterpret_cast<const T*>(data);
        if (g < last_reduce) {
          K::combine(reinterpret_cast<T*>(next), got, in.data() + f, l - f, op);
        } else if (g == last_reduce) {
          K::combine(out.data() + f, got, in.data() + f, l - f, op);
          K::copy(next, out.data() + f, (l - f) * sizeof(T));
        } else {
          K::copy(out.data() + f, data, (l - f) * sizeof(T));
          if (next) K::copy(next, data, (l - f) * sizeof(T));
        }
      });
}

template <provider P, element T>
result<void> allreduce(communicator<P>& c, std::span<T> inout, reduce_op op, memory_location where = {}) {
  return allreduce(c, std::span<const T>(inout), inout, op, where);
}

}  // namespace fabrix::coll
