// fabrix::cuda::staged<P, Engine> — any network provider P, able to move
// cuda_device memory: itself a provider (the same concept), so
// domain<staged<P, E>>, queue_pair<...> and any_provider work unchanged.
//
//   using P = fabrix::cuda::staged<fabrix::ucx::provider>;   // <fabrix/cuda/staged_cuda.hpp>
//   auto dom = fabrix::domain<P>::create(opts).value();
//   dom.caps().gpu                // direct, staged, or none (with the reason in describe())
//
// What it does:
// - Host memory, and everything when P reaches device memory itself
//   (P's runtime_caps().gpu == direct), goes to P untouched.
// - Otherwise cuda_device memory is *staged*: at domain creation the adapter
//   allocates chunk × depth × operations bytes of host memory through the
//   engine (pinned, for the CUDA engine) and registers it with P once. An
//   operation whose local memory is staged device memory — the source of
//   write / write_with_imm / send, the destination of read / recv /
//   fetch_add / compare_swap — moves through `depth` of those slots in
//   chunks, engine copies of one chunk overlapping P's transfer of the
//   previous one (staging_pipeline). See staged/lane.hpp for each opcode.
// - Staged device memory can only be local. A peer's one-sided access to it
//   would need the target to stage on its side, and one-sided operations
//   have no target-side hook, so registering it with any remote right is
//   refused with status::unsupported. Expose host memory (or use a provider
//   with a direct GPU path) for peers to read and write.
//
// Contract kept: one completion per user operation, with its token, status,
// opcode and byte count, after all of its data moved (a staged read's, recv's
// and atomic's completion comes after the device copy finished); an error of
// any chunk or copy fails that operation only; all lanes busy → status::again;
// no allocation, registration or thread per operation — copies and chunk
// posts advance inside poll(). write_with_imm's notification follows all of
// its data (the last chunk goes with the notification after an inner flush).
// Peers see an ordinary P peer: the wire is P's, so a staged domain and a
// plain P domain talk to each other.
//
// Limits: scatter-gather lists that hold staged device memory, and
// send/recv over one chunk, are refused (unsupported) at post; a flush
// returns again while a staged operation posted before it on the same queue
// pair runs. Copies use one stream on staging_config::device (CUDA copies
// between devices go through unified addressing).
//
// Configuration: staging_config::from_env() (FABRIX_STAGING_*), read when
// the domain is created. Needs no CUDA headers; Engine decides.
#pragma once

#include <fabrix/any_provider.hpp>
#include <fabrix/concepts.hpp>
#include <fabrix/cuda/gpu_path.hpp>
#include <fabrix/cuda/staged/config.hpp>
#include <fabrix/cuda/staged/endpoint.hpp>
#include <fabrix/cuda/staged/engine.hpp>
#include <fabrix/cuda/staged/region.hpp>
#include <fabrix/cuda/staged/state.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace fabrix::cuda {

namespace detail {

template <class P>
struct staged_name_storage {
  static constexpr std::string_view suffix = "+staged";
  static constexpr auto value = [] {
    std::array<char, P::name.size() + suffix.size()> s{};
    std::copy(P::name.begin(), P::name.end(), s.begin());
    std::copy(suffix.begin(), suffix.end(), s.begin() + P::name.size());
    return s;
  }();
};

constexpr capabilities staged_caps(capabilities c) noexcept {
  if (c.gpu != gpu_path::direct) c.gpu = gpu_path::staged;
  return c;
}

}  // namespace detail

template <provider P, staging_engine Engine>
struct staged {
  static constexpr std::string_view name{detail::staged_name_storage<P>::value.data(),
                                         detail::staged_name_storage<P>::value.size()};
  static constexpr capabilities caps = detail::staged_caps(P::caps);
  using inner_provider = P;
  using engine_type = Engine;
  using state = detail::staged_state<P, Engine>;
  using region_impl = detail::staged_region<P>;
  using endpoint_impl = detail::staged_endpoint<P, Engine>;

  class domain_impl {
   public:
    // opts go to P; staging is configured by staging_config::from_env().
    static result<domain_impl> create(const domain_options& opts) {
      auto config = staging_config::from_env();
      if (!config) return unexpected(std::move(config).error());
      return create(opts, *config);
    }
    static result<domain_impl> create(const domain_options& opts, const staging_config& config) {
      auto checked = config.checked();
      if (!checked) return unexpected(std::move(checked).error());
      auto inner = P::domain_impl::create(opts);
      if (!inner) return unexpected(std::move(inner).error());
      auto s = std::make_unique<state>(std::move(*inner));
      s->config = config;
      if (s->inner.runtime_caps().gpu == gpu_path::direct)
        s->path = gpu_path::direct;
      else
        s->set_up_staging();
      return domain_impl(std::move(s));
    }

    // Device memory passed as host memory would reach the inner provider
    // (which may not know CUDA at all); the core asks this first. The
    // engine recognises device memory where it can (optional
    // Engine::check_host_memory(addr, provider_name)).
    result<void> check_host_memory(const void* addr, std::size_t len) {
      if constexpr (checks_host_memory<P>) {
        if (auto c = s_->inner.check_host_memory(addr, len); !c) return c;
      }
      if constexpr (requires { Engine::check_host_memory(addr, name); }) {
        return Engine::check_host_memory(addr, name);
      } else {
        return {};
      }
    }

    result<region_impl> register_memory(void* addr, std::size_t len, memory_location where, access rights) {
      if (where.kind != memory_kind::cuda_device || s_->path == gpu_path::direct) {
        auto r = s_->inner.register_memory(addr, len, where, rights);
        if (!r) return unexpected(std::move(r).error());
        return region_impl(std::move(*r));
      }
      if (s_->path == gpu_path::none) return refuse_device_memory(name, s_->why_none);
      if (rights != access::local)
        return unexpected(status::unsupported,
                          "staged cuda_device memory can only be used locally (source of write, write_with_imm "
                          "and send; destination of read, recv and atomics): a peer cannot reach it without a "
                          "direct GPU path, so remote rights are refused; let peers target host memory",
                          std::string(name));
      remote_buffer rb;
      rb.provider = s_->inner.provider();
      rb.owner = s_->inner.owner();
      rb.rights = access::local;
      rb.location = where;
      rb.address = reinterpret_cast<std::uintptr_t>(addr);
      rb.length = len;
      return region_impl(rb);
    }

    // Completions of staged operations first, then P's (its own operations
    // for staged chunks are consumed here and never returned).
    std::size_t poll(std::span<completion> out) {
      s_->advance_all();
      std::size_t w = s_->done.drain(out);
      if (w == out.size()) return w;
      const std::size_t got = s_->inner.poll(out.subspan(w));
      const std::size_t end = w + got;
      for (std::size_t i = w; i < end; ++i) {
        if ((out[i].flags & detail::flag_staging) != 0 && out[i].op != opcode::remote_write_imm)
          s_->route(out[i]);
        else
          out[w++] = out[i];
      }
      s_->advance_all();
      return w + s_->done.drain(out.subspan(w));
    }

    // While engine copies run (they have no fd), sleeps at most 1 ms.
    status wait(std::chrono::milliseconds timeout) {
      if (!s_->done.empty()) return status::ok;
      if (s_->copying()) {
        const status st = s_->inner.wait(std::min(timeout, std::chrono::milliseconds(1)));
        return st == status::timed_out && timeout.count() > 1 ? status::ok : st;
      }
      return s_->inner.wait(timeout);
    }

    result<std::vector<std::byte>> address() const { return s_->inner.address(); }
    result<endpoint_impl> connect(std::span<const std::byte> peer, std::uint32_t peer_id) {
      auto e = s_->inner.connect(peer, peer_id);
      if (!e) return unexpected(std::move(e).error());
      return endpoint_impl(s_.get(), std::move(*e), peer_id);
    }
    provider_id provider() const noexcept { return s_->inner.provider(); }
    std::uint64_t owner() const noexcept { return s_->inner.owner(); }
    capabilities runtime_caps() const noexcept {
      capabilities c = s_->inner.runtime_caps();
      c.gpu = s_->path;
      return c;
    }
    // The inner provider's device (staging goes over its NIC).
    std::optional<std::string> device_pci() const {
      if constexpr (requires { s_->inner.device_pci(); })
        return s_->inner.device_pci();
      else
        return std::nullopt;
    }
    std::string describe() const {
      std::string d = s_->inner.describe() + ", gpu " + std::string(to_string(s_->path));
      if (s_->path == gpu_path::staged)
        d += " (" + std::to_string(s_->config.operations) + " ops x " + std::to_string(s_->config.depth) + " x " +
             std::to_string(s_->config.chunk) + " B bounce slots)";
      if (s_->path == gpu_path::none) d += " (" + s_->why_none + ")";
      return d;
    }

    typename P::domain_impl& inner() noexcept { return s_->inner; }
    const staging_config& config() const noexcept { return s_->config; }
    // Staged operations in flight.
    std::size_t staged_in_flight() const noexcept { return s_->busy; }

   private:
    explicit domain_impl(std::unique_ptr<state> s) : s_(std::move(s)) {}
    std::unique_ptr<state> s_;
  };
};

}  // namespace fabrix::cuda
