// fabrix::coll::allgather — every rank ends with all ranks' inputs, rank r's
// as block r of `out` (n blocks of in.size() elements). Ring algorithm
// (ring.hpp); each rank receives (n-1)/n of `out`.
#pragma once

#include <fabrix/collectives/local_kernels.hpp>
#include <fabrix/collectives/ring.hpp>

#include <type_traits>

#include <span>

namespace fabrix::coll {

// `in` may be block rank() of `out`; otherwise they must not overlap. Works
// on any trivially copyable element type. Same in.size() on every rank.
template <provider P, class T>
requires std::is_trivially_copyable_v<T> result<void> allgather(communicator<P>& c, std::span<const T> in,
                                                                std::span<T> out, memory_location where = {}) {
  if (auto h = c.health(); !h) return h;
  const std::size_t count = in.size();
  if (sizeof(T) > c.opts().chunk_bytes)
    return unexpected(status::invalid_argument, "allgather: element larger than chunk_bytes", "collectives");
  if (out.size() != count * static_cast<std::size_t>(c.size()))
    return unexpected(status::invalid_argument, "allgather: output must hold size() * in.size() elements",
                      "collectives");
  return detail::with_kernels(c, where, "allgather", [&](auto& k) -> result<void> {
    const std::size_t mine = static_cast<std::size_t>(c.rank()) * count;
    k.copy(out.data() + mine, in.data(), in.size_bytes());
    if (c.size() == 1) return {};
    const int n = c.size();
    const auto s =
        detail::schedule_for<T>(c, 0, static_cast<std::size_t>(n) - 1, count, detail::ring_schedule::layout::blocks);
    return detail::run_ring(c, k, s, sizeof(T), detail::copy_send_range(s, k, static_cast<const T*>(out.data())),
                            [&](std::size_t m, const std::byte* data, std::byte*) {
                              const auto [f, l] = s.recv_range(m);
                              k.copy(out.data() + f, data, (l - f) * sizeof(T));
                              return detail::absorbed{.as_is = true};  // passed on as it is
                            });
  });
}

}  // namespace fabrix::coll
