// fabrix::coll::allgather — every rank ends with all ranks' inputs, rank r's
// as block r of `out` (n blocks of in.size() elements). Ring algorithm
// (ring.hpp); each rank receives (n-1)/n of `out`.
#pragma once

#include <fabrix/collectives/local_kernels.hpp>
#include <fabrix/collectives/ring.hpp>
#include <fabrix/collectives/zero_copy.hpp>

#include <optional>
#include <span>
#include <type_traits>

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
    // Registered output (zero_copy.hpp): blocks go out from `out` itself and,
    // where the right neighbour registered its output, straight into it.
    detail::zero_copy_io<P> io;
    const bool zero_copy = detail::zero_copy_applies(c, out.size_bytes());
    if (zero_copy) detail::find_registered(c, io, nullptr, 0, out.data(), out.size_bytes(), sizeof(T));
    const bool lands_in_out = io.out_lands;  // the left neighbour writes into `out`
    auto route = [&](std::size_t f, std::size_t l) {
      return detail::chunk_route{.from = io.out ? std::optional(io.output(f, l)) : std::nullopt,
                                 .to = io.right_output(f, l)};
    };
    auto produce = [&](std::size_t m, std::byte* slot) {
      const auto [f, l] = s.send_range(m);
      if (io.out == nullptr) k.copy(slot, out.data() + f, (l - f) * sizeof(T));
      return route(f, l);
    };
    auto absorb = [&](std::size_t m, const std::byte* data, std::byte*) {
      const auto [f, l] = s.recv_range(m);
      if (!lands_in_out) k.copy(out.data() + f, data, (l - f) * sizeof(T));
      // Passed on as it is: from `out` when registered, else copied to a slot by the ring.
      return detail::absorbed{.as_is = io.out == nullptr, .route = route(f, l)};
    };
    if (!zero_copy) return detail::run_ring(c, k, s, sizeof(T), produce, absorb);
    detail::output_exchange side(c, io, out.size_bytes(), [](std::size_t) { return true; });
    if (auto r = side.start(); !r) return r;
    return detail::run_ring(c, k, s, sizeof(T), produce, absorb, side);
  });
}

}  // namespace fabrix::coll
