// fabrix::detail::one_of<Ps...> — a provider that is, per domain, whichever
// one of Ps its domain_options::provider names: the provider domains of a
// static fabrix::routed<Ps...> (routed.hpp). A call goes to the provider it
// holds through a compare of the alternative's index, not through a virtual
// call as any_provider's do (no cheaper per operation, measured:
// perf/results/2026-12-07-routed-static).
//
// It is no provider of the registry and has no name on the wire:
// provider() is the held provider's, and its remote_buffers are that
// provider's. allocate_memory where the held provider has none,
// check_host_memory where it checks nothing and device_pci where it
// reports none answer as any_provider's (unsupported; ok; nullopt).
// Lifetime and threading: the held provider's.
#pragma once

#include <fabrix/any_provider.hpp>
#include <fabrix/concepts.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace fabrix::detail {

// f(the alternative `v` holds). Every call of f must return the same type.
// `v` is never valueless: its alternatives are only ever moved in whole.
template <std::size_t I = 0, class Variant, class F>
decltype(auto) visit_held(Variant& v, F&& f) {
  if constexpr (I + 1 == std::variant_size_v<std::remove_const_t<Variant>>) {
    return f(*std::get_if<I>(&v));
  } else {
    if (v.index() == I) return f(*std::get_if<I>(&v));
    return visit_held<I + 1>(v, std::forward<F>(f));
  }
}

template <provider... Ps>
struct one_of {
  static_assert(sizeof...(Ps) > 0, "one_of needs at least one provider");
  static constexpr std::string_view name = "one_of";
  static constexpr std::array<std::string_view, sizeof...(Ps)> names{Ps::name...};
  static constexpr capabilities caps = any_provider::caps;

  static constexpr bool has(std::string_view n) noexcept {
    for (auto x : names)
      if (x == n) return true;
    return false;
  }
  // "ucx, ofi", for messages.
  static std::string list() {
    std::string s;
    for (auto x : names) s += (s.empty() ? "" : ", ") + std::string(x);
    return s;
  }

  class region_impl {
   public:
    template <std::size_t I, class R>
    region_impl(std::in_place_index_t<I> at, R&& r) : v_(at, std::forward<R>(r)) {}
    const remote_buffer& remote() const noexcept {
      return visit_held(v_, [](const auto& r) -> const remote_buffer& { return r.remote(); });
    }
    void* descriptor() const noexcept {
      return visit_held(v_, [](const auto& r) { return r.descriptor(); });
    }

   private:
    std::variant<typename Ps::region_impl...> v_;
  };

  class endpoint_impl {
   public:
    template <std::size_t I, class E>
    endpoint_impl(std::in_place_index_t<I> at, E&& e) : v_(at, std::forward<E>(e)) {}
    status post(std::span<const operation> ops, std::size_t& posted) {
      return visit_held(v_, [&](auto& e) { return post_on(e, ops, posted); });
    }
    void set_default_options(op_options defaults) {
      visit_held(v_, [&](auto& e) { e.set_default_options(defaults); });
    }
    std::uint64_t finished() const noexcept {
      return visit_held(v_, [](const auto& e) { return e.finished(); });
    }
    result<import_ref> import_key(const remote_buffer& rb) {
      return visit_held(v_, [&](auto& e) { return e.import_key(rb); });
    }
    status release_key(import_ref ref) {
      return visit_held(v_, [&](auto& e) { return e.release_key(ref); });
    }

   private:
    // Out of line: the provider's post loop is compiled here whole (its
    // per-operation path inlined into it, as in any_provider's model),
    // not folded into the routed endpoint's post, where the compiler
    // would rather call the provider per operation.
    template <class E>
    [[gnu::noinline]] static status post_on(E& e, std::span<const operation> ops, std::size_t& posted) {
      return e.post(ops, posted);
    }

    std::variant<typename Ps::endpoint_impl...> v_;
  };

  class domain_impl {
   public:
    // opts.provider: the name of one of Ps; unsupported for any other.
    static result<domain_impl> create(const domain_options& opts) {
      return create_at(opts, std::make_index_sequence<sizeof...(Ps)>{});
    }

    result<region_impl> register_memory(void* addr, std::size_t len, memory_location where, access rights) {
      return wrap<region_impl>([&](auto& d) { return d.register_memory(addr, len, where, rights); });
    }
    result<region_impl> allocate_memory(std::size_t len, access rights) {
      return wrap<region_impl>([&]<class D>(D& d) -> decltype(d.register_memory(nullptr, 0, {}, rights)) {
        if constexpr (requires { d.allocate_memory(len, rights); })
          return d.allocate_memory(len, rights);
        else
          return unexpected(status::unsupported, "allocate_memory: this provider does not allocate memory");
      });
    }
    result<void> check_host_memory(const void* addr, std::size_t len) {
      return visit_held(v_, [&](auto& d) -> result<void> {
        if constexpr (requires { d.check_host_memory(addr, len); })
          return d.check_host_memory(addr, len);
        else
          return {};
      });
    }
    std::size_t poll(std::span<completion> out) {
      return visit_held(v_, [&](auto& d) { return d.poll(out); });
    }
    status wait(std::chrono::milliseconds timeout) {
      return visit_held(v_, [&](auto& d) { return d.wait(timeout); });
    }
    result<std::vector<std::byte>> address() const {
      return visit_held(v_, [](const auto& d) { return d.address(); });
    }
    result<endpoint_impl> connect(std::span<const std::byte> peer, std::uint32_t peer_id) {
      return wrap<endpoint_impl>([&](auto& d) { return d.connect(peer, peer_id); });
    }
    provider_id provider() const noexcept {
      return visit_held(v_, [](const auto& d) { return d.provider(); });
    }
    std::uint64_t owner() const noexcept {
      return visit_held(v_, [](const auto& d) { return d.owner(); });
    }
    capabilities runtime_caps() const noexcept {
      return visit_held(v_, [](const auto& d) { return d.runtime_caps(); });
    }
    std::string describe() const {
      return visit_held(v_, [](const auto& d) { return std::string(d.describe()); });
    }
    std::optional<std::string> device_pci() const {
      return visit_held(v_, [](const auto& d) -> std::optional<std::string> {
        if constexpr (requires { d.device_pci(); })
          return d.device_pci();
        else
          return std::nullopt;
      });
    }

   private:
    template <std::size_t I, class D>
    domain_impl(std::in_place_index_t<I> at, D&& d) : v_(at, std::forward<D>(d)) {}

    template <std::size_t... I>
    static result<domain_impl> create_at(const domain_options& opts, std::index_sequence<I...>) {
      std::optional<result<domain_impl>> made;
      auto try_one = [&]<std::size_t K>(std::integral_constant<std::size_t, K>) {
        using P = std::tuple_element_t<K, std::tuple<Ps...>>;
        if (made || opts.provider != P::name) return;
        auto d = P::domain_impl::create(opts);
        if (!d)
          made.emplace(unexpected(std::move(d).error()));
        else
          made.emplace(domain_impl(std::in_place_index<K>, std::move(*d)));
      };
      (try_one(std::integral_constant<std::size_t, I>{}), ...);
      if (made) return std::move(*made);
      return unexpected(status::unsupported,
                        "provider '" + opts.provider + "' is not one of this routed domain's (" + list() + ")");
    }

    // The held provider's result<X> made this one's result<Out>, the
    // alternative at the same index.
    template <class Out, class F>
    result<Out> wrap(F&& f) {
      return wrap_at<Out>(std::forward<F>(f), std::make_index_sequence<sizeof...(Ps)>{});
    }
    template <class Out, class F, std::size_t... I>
    result<Out> wrap_at(F&& f, std::index_sequence<I...>) {
      std::optional<result<Out>> out;
      auto one = [&]<std::size_t K>(std::integral_constant<std::size_t, K>) {
        if (out || v_.index() != K) return;
        auto r = f(*std::get_if<K>(&v_));
        if (!r)
          out.emplace(unexpected(std::move(r).error()));
        else
          out.emplace(Out(std::in_place_index<K>, std::move(*r)));
      };
      (one(std::integral_constant<std::size_t, I>{}), ...);
      return std::move(*out);
    }

    std::variant<typename Ps::domain_impl...> v_;
  };
};

}  // namespace fabrix::detail
