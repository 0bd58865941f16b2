// fabrix::coll::reduce_scatter — rank r ends with block r of the
// element-wise reduction: `in` holds n blocks of out.size() elements. Ring
// algorithm (ring.hpp); each rank sends and receives (n-1)/n of `in`.
#pragma once

#include <fabrix/collectives/local_kernels.hpp>
#include <fabrix/collectives/reduce.hpp>
#include <fabrix/collectives/ring.hpp>

#include <span>

namespace fabrix::coll {

// `in` and `out` must not overlap. Same out.size() on every rank.
template <provider P, element T>
result<void> reduce_scatter(communicator<P>& c, std::span<const T> in, std::span<T> out, reduce_op op,
                            memory_location where = {}) {
  if (auto h = c.health(); !h) return h;
  const std::size_t count = out.size();
  if (in.size() != count * static_cast<std::size_t>(c.size()))
    return unexpected(status::invalid_argument, "reduce_scatter: input must hold size() * out.size() elements",
                      "collectives");
  return detail::with_kernels(c, where, "reduce_scatter", [&](auto& k) -> result<void> {
    if (c.size() == 1) {
      k.copy(out.data(), in.data(), in.size_bytes());
      return {};
    }
    const int n = c.size();
    const std::size_t mine = static_cast<std::size_t>(c.rank()) * count;
    const auto s =
        detail::schedule_for<T>(c, 1, static_cast<std::size_t>(n) - 1, count, detail::ring_schedule::layout::blocks);
    return detail::run_ring(c, k, s, sizeof(T), detail::copy_send_range(s, k, in.data()),
                            [&](std::size_t m, const std::byte* data, std::byte* next) {
                              const auto [f, l] = s.recv_range(m);
                              const T* got = reinterpret_cast<const T*>(data);
                              k.combine(next ? reinterpret_cast<T*>(next) : out.data() + (f - mine), got, in.data() + f,
                                        l - f, op);
                              return detail::absorbed{};
                            });
  });
}

}  // namespace fabrix::coll
