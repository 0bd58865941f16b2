// The shared state of one staged domain: the inner provider's domain, the
// bounce memory (allocated and registered with the inner provider once), the
// copy engine and the lanes (one staged operation each). Endpoints and
// regions point to it; it lives in a unique_ptr so the domain can move.
//
// Member order is teardown order, reversed: lanes go first, then the bounce
// registration, the engine (which waits for its copies), the bounce memory,
// and the inner domain last.
#pragma once

#include <fabrix/concepts.hpp>
#include <fabrix/cuda/staged/config.hpp>
#include <fabrix/cuda/staged/engine.hpp>
#include <fabrix/cuda/staged/lane.hpp>
#include <fabrix/detail/completion_ring.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace fabrix::cuda::detail {

template <provider P, staging_engine E>
struct staged_state {
  explicit staged_state(typename P::domain_impl d) : inner(std::move(d)) {}

  typename P::domain_impl inner;
  staging_config config;
  gpu_path path = gpu_path::none;
  std::string why_none;  // the reason, when path == none
  std::optional<typename E::host_memory> bounce_memory;
  std::optional<E> engine;
  std::optional<typename P::region_impl> bounce_region;
  std::vector<std::unique_ptr<lane<P, E>>> lanes;
  fabrix::detail::completion_ring done;  // finished staged operations, for poll()
  std::uint64_t next_gen = 1;
  std::size_t busy = 0;  // lanes in use

  // Allocates and registers the bounce slots; on failure the domain stays
  // usable for host memory and reports gpu_path::none with the reason.
  void set_up_staging() {
    auto eng = E::create(config.device, static_cast<unsigned>(config.slots()));
    if (!eng) return none(eng.error().describe());
    auto mem = E::allocate_host(config.bounce_bytes());
    if (!mem) return none(mem.error().describe());
    engine.emplace(std::move(*eng));
    bounce_memory.emplace(std::move(*mem));
    auto bytes = bounce_memory->bytes();
    auto reg = inner.register_memory(bytes.data(), bytes.size(), memory_location{}, access::local);
    if (!reg) return none("registering the bounce buffer: " + reg.error().describe());
    bounce_region.emplace(std::move(*reg));
    const remote_buffer& rb = bounce_region->remote();
    const local_slice whole{bytes.data(), bytes.size(), bounce_region->descriptor(), rb.owner, memory_location{}};
    const std::size_t per_lane = config.chunk * config.depth;
    for (unsigned i = 0; i < config.operations; ++i)
      lanes.push_back(std::make_unique<lane<P, E>>(*engine, i, bytes.subspan(i * per_lane, per_lane), config.chunk,
                                                   config.depth, whole));
    path = gpu_path::staged;
  }

  void none(std::string why) {
    path = gpu_path::none;
    why_none = std::move(why);
  }

  // A lane for a new staged operation, or nullptr (back-pressure).
  lane<P, E>* free_lane() noexcept {
    if (busy == lanes.size()) return nullptr;
    for (auto& l : lanes)
      if (!l->busy()) return l.get();
    return nullptr;
  }

  // Whether a staged operation posted on `ep` has not completed yet.
  bool busy_on(const typename P::endpoint_impl* ep) const noexcept {
    if (busy == 0) return false;
    for (const auto& l : lanes)
      if (l->busy() && l->endpoint() == ep) return true;
    return false;
  }

  // Routes one completion of an inner operation to its lane.
  void route(const completion& c) {
    const unsigned i = token_lane(c.token);
    if (i >= lanes.size()) return;
    lane<P, E>& l = *lanes[i];
    if (!l.busy() || (l.generation() & 0xffffffffffull) != token_gen(c.token)) return;  // a forgotten operation
    l.on_inner(c);
    if (l.advance(done)) --busy;
  }

  void advance_all() {
    if (busy == 0) return;
    for (auto& l : lanes)
      if (l->busy() && l->advance(done)) --busy;
  }

  void detach(const typename P::endpoint_impl* ep) noexcept {
    for (auto& l : lanes)
      if (l->busy() && l->endpoint() == ep) l->detach();
  }

  bool copying() noexcept {
    if (busy == 0) return false;
    for (auto& l : lanes)
      if (l->busy() && l->copying()) return true;
    return false;
  }
};

}  // namespace fabrix::cuda::detail
