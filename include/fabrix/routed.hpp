// fabrix::routed — one domain over several providers, picking per peer and
// per memory kind the provider that serves it: a node-mate's host memory
// over the node's fastest transport, another node's over the network, a
// node-mate's GPU memory over cuda_ipc. It is a provider itself (the same
// concept), so domain<routed<>>, queue_pair<routed<>>, connect_all and the
// collectives work unchanged, with one poll, one wait and one key per
// region. routed<> opens its providers by name (any_provider: the ones
// compiled in and the plugins); routed<Ps...> (fabrix::routed<
// fabrix::ucx::provider, fabrix::cuda_ipc::provider>) opens only Ps, each
// held by its type (routed/one_of.hpp), and is the same provider on the
// wire (the end of this file).
//
//   auto dom = fabrix::domain<fabrix::routed<>>::create().value();   // or fabrix::open("routed"), open("auto")
//   auto qp = dom.connect(peer_blob).value();
//   qp.describe();   // "host memory: ofi:shm (peer on this node); device memory: ..."
//
// fabrix::open("auto") opens it in a program that includes this header
// where its default routes open two or more provider domains, or with
// FABRIX_ROUTE (any_provider.hpp says when not; open_routed_for_auto).
// A peer that is one provider's domain, not routed, is reached too: it
// connects through our provider domain of its provider (domain::connect,
// detail/routed_peer.hpp), and we connect to its blob with the first
// provider domain of our host routes that takes it (connect_plain) and
// adopt its remote_buffers.
//
// Which provider serves what: route_config (routed/config.hpp), from
// FABRIX_ROUTE, else domain_options::transport, else the default: node =
// ucx (its default transports use shared memory and CMA on a node), else
// ofi:shm; net = the highest-priority network provider that opens (verbs,
// ucx, ofi; the same domain as node where it is the same provider); gpu =
// cuda_ipc where it opens; staged = "<net provider>+staged" where the net
// route's provider does not reach device memory and the program enabled
// staged providers (cuda/staged_open.hpp; with the CUDA engine on a GPU
// node), so that this process's device memory reaches peers' host memory
// through host buffers. Every process of a job uses the same routes:
// connect() refuses a peer that has no provider domain of the same provider
// and transport for the route it needs. domain_options::device is not
// passed to the providers (it names one provider's device); a route names
// its devices itself ("net=ofi:tcp@eth0,eth1": two rails, large writes and
// reads striped over them; routed/endpoint.hpp).
//
// Whether a peer shares this node: detail::node_id() (host name and network
// namespace, or FABRIX_NODE_ID; process_identity.hpp), carried in the
// address blob.
//
// Memory: register_memory registers in every provider domain that takes the
// memory kind (host memory in the node and net domains, and in the gpu
// domain where it accepts it; device memory in the gpu domain, in any whose
// provider reaches device memory, and in the staged domain with local
// rights, its key left out). The region's remote_buffer carries
// each provider's remote_buffer in its key (routed/key.hpp); a registration
// whose providers' keys do not fit remote_buffer::max_key_size is refused
// (unsupported).
//
// Progress: poll() polls every provider domain, starting with a different
// one each call. wait() with one provider domain is that provider's; with
// several it waits on each in turn for at most 1 ms, so a completion on one
// is seen within about 1 ms while it sleeps on another.
//
// Lifetime and threading: as every provider (concepts.hpp).
#pragma once

#include <fabrix/any_provider.hpp>
#include <fabrix/detail/describe_region.hpp>
#include <fabrix/detail/env.hpp>
#include <fabrix/detail/process_identity.hpp>
#include <fabrix/detail/routed_peer.hpp>
#include <fabrix/routed/address.hpp>
#include <fabrix/routed/config.hpp>
#include <fabrix/routed/endpoint.hpp>
#include <fabrix/routed/key.hpp>
#include <fabrix/routed/one_of.hpp>
#include <fabrix/routed/state.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace fabrix::detail {

// The routed provider over provider domains of Sub (routed_sub's): the
// body of routed<> (Sub = any_provider) and of routed<Ps...>
// (Sub = one_of<Ps...>).
template <class Sub>
struct routed_provider {
  static constexpr bool is_static = !std::is_same_v<Sub, any_provider>;
  using state = routed_state<Sub>;
  using endpoint_state = routed_endpoint<Sub>;
  using region_state = routed_region_state<Sub>;

  static constexpr std::string_view name = "routed";
  static constexpr provider_id id = detail::routed_provider_id;
  // Whatever its providers offer; runtime_caps() says what they do.
  static constexpr capabilities caps = any_provider::caps;

  class region_impl {
   public:
    explicit region_impl(std::unique_ptr<region_state> r) : r_(std::move(r)) {}
    const remote_buffer& remote() const noexcept { return r_->remote; }
    void* descriptor() const noexcept { return r_.get(); }

   private:
    std::unique_ptr<region_state> r_;
  };

  // The routed endpoint lives on the heap: the domain's poll() reaches
  // one that holds operations by address (routed/endpoint.hpp).
  class endpoint_impl {
   public:
    explicit endpoint_impl(std::unique_ptr<endpoint_state> e) : e_(std::move(e)) {}
    status post(std::span<const operation> ops, std::size_t& posted) { return e_->post(ops, posted); }
    void set_default_options(op_options defaults) { e_->set_default_options(defaults); }
    std::uint64_t finished() const noexcept { return e_->finished(); }
    result<import_ref> import_key(const remote_buffer& rb) { return e_->import_key(rb); }
    status release_key(import_ref ref) { return e_->release_key(ref); }
    std::string describe() const { return e_->describe(); }
    bool adopt_remote(const remote_buffer& foreign, remote_buffer& out) const noexcept {
      return e_->adopt_remote(foreign, out);
    }
    endpoint_state* operator->() const noexcept { return e_.get(); }

   private:
    std::unique_ptr<endpoint_state> e_;
  };

  class domain_impl {
   public:
    static result<domain_impl> create(const domain_options& opts) {
      const char* env = detail::route_from_environment();
      const std::string text = env ? std::string(env) : opts.transport;
      auto s = std::make_unique<state>();
      s->node = detail::node_id();
      if (std::string why; !s->read_environment(why))
        return unexpected(status::invalid_argument, why, std::string(name));
      if (!text.empty()) {
        auto config = route_config::parse(text);
        if (!config) return unexpected(std::move(config).error());
        for (auto c : all_route_classes) {
          if (!(*config)[c]) continue;
          if (auto e = open_sub(*s, c, *(*config)[c], opts); !e) {
            error why = std::move(e).error();
            why.message = "route " + std::string(to_string(c)) + "=" + (*config)[c]->text() + ": " + why.message;
            return unexpected(std::move(why));
          }
        }
        return domain_impl(std::move(s));
      }
      std::string tried;
      auto first_that_opens = [&](route_class c, const std::vector<route_choice>& choices) {
        for (const auto& ch : choices) {
          auto e = open_sub(*s, c, ch, opts);
          if (e) return;
          tried += (tried.empty() ? "" : "; ") + ch.text() + ": " + e.error().describe();
        }
      };
      std::vector<route_choice> node;
      for (route_choice ch : {route_choice{"ucx", "", {}}, route_choice{"ofi", "shm", {}}})
        if (can_open(ch.provider)) node.push_back(std::move(ch));
      first_that_opens(route_class::node, node);
      // routed<>: the compiled-in providers best first, then the plugins on
      // the plugin path; routed<Ps...>: Ps in order. "<name>+staged"
      // entries open by name only (cuda/staged_open.hpp).
      std::vector<route_choice> network;
      auto add_network = [&](std::string_view n) {
        if (n == "cuda_ipc" || n.find('+') != std::string_view::npos) return;
        route_choice ch{std::string(n), "", {}};
        if (std::find(network.begin(), network.end(), ch) == network.end()) network.push_back(std::move(ch));
      };
      if constexpr (is_static) {
        for (auto n : Sub::names) add_network(n);
      } else {
        for (const auto& e : detail::providers_by_priority()) add_network(e.name);
        for (const auto& f : find_provider_plugins()) add_network(f.name);
      }
      first_that_opens(route_class::net, network);
      if (s->subs.empty())
        return unexpected(status::unsupported, "no provider opened for any route: " + tried, std::string(name));
      if (can_open("cuda_ipc")) first_that_opens(route_class::gpu, {{"cuda_ipc", "", {}}});
      open_default_staged(*s, opts);
      return domain_impl(std::move(s));
    }

    result<void> check_host_memory(const void* addr, std::size_t len) {
      for (auto& sub : s_->subs)
        if (auto c = sub.dom->check_host_memory(addr, len); !c) return c;
      return {};
    }

    result<region_impl> register_memory(void* addr, std::size_t len, memory_location where, access rights) {
      return register_in_subs(std::make_unique<region_state>(), addr, len, where, rights);
    }

    // Host memory allocated by the provider of the node route (else the net
    // route) where it allocates (UCX maps it so that node-mates' writes
    // are plain copies), then registered in the other provider domains as
    // register_memory does; status::unsupported where neither allocates.
    result<region_impl> allocate_memory(std::size_t len, access rights) {
      std::string why;
      for (const int k : host_subs()) {
        if (k < 0) continue;
        auto& sub = s_->subs[static_cast<std::size_t>(k)];
        auto a = sub.dom->allocate_memory(len, rights);
        if (!a && a.code() == status::unsupported) {
          why += (why.empty() ? "" : "; ") + a.error().describe();
          continue;
        }
        if (!a) return unexpected(std::move(a).error());
        void* addr = reinterpret_cast<void*>(static_cast<std::uintptr_t>(a->remote().address));
        auto r = std::make_unique<region_state>();
        r->subs[static_cast<std::size_t>(k)] = std::move(*a);
        r->allocated_by = k;
        return register_in_subs(std::move(r), addr, len, memory_location{}, rights);
      }
      return unexpected(status::unsupported,
                        "allocate_memory: no provider of this domain's host routes allocates memory (" + why +
                            "); allocate it yourself and register_memory it",
                        std::string(name));
    }

    // Every provider domain's completions; the parts of a joined operation
    // are consumed here and its one completion returned in their place.
    // Joins failed by a rail going down come first.
    std::size_t poll(std::span<completion> out) {
      std::size_t w = s_->take_failed(out);
      const std::size_t n = s_->subs.size();
      const std::size_t start = s_->poll_start++ % n;
      for (std::size_t k = 0; k < n && w < out.size(); ++k) {
        const std::size_t at = (start + k) % n;
        auto& sub = s_->subs[at];
        const std::size_t end = w + sub.dom->poll(out.subspan(w));
        if (sub.is_rail)
          for (std::size_t i = w; i < end; ++i)
            if (out[i].status == status::ok) {
              s_->progressed(at, detail::routed_clock::now());
              break;
            }
        for (std::size_t i = w; i < end; ++i) {
          if ((out[i].flags & detail::flag_routed) == 0)
            out[w++] = out[i];
          else if (completion c; s_->finish_join(out[i], static_cast<int>(at), c))
            out[w++] = c;
        }
      }
      if (s_->has_rails && s_->rails_in_flight()) s_->check_rails(detail::routed_clock::now());
      for (std::size_t k = 0; k < s_->holding.size();) {
        endpoint_state* e = s_->holding[k];
        e->advance();
        if (e->holding())
          ++k;
        else
          s_->holding.erase(s_->holding.begin() + static_cast<std::ptrdiff_t>(k));
      }
      if (!s_->failed.empty()) w += s_->take_failed(out.subspan(w));
      return w;
    }

    status wait(std::chrono::milliseconds timeout) {
      if (s_->subs.size() == 1) return s_->subs[0].dom->wait(timeout);
      const auto deadline = std::chrono::steady_clock::now() + timeout;
      for (auto& sub : s_->subs)
        if (sub.dom->wait(std::chrono::milliseconds(0)) == status::ok) return status::ok;
      for (std::size_t k = 0;; ++k) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) return status::timed_out;
        const status st = s_->subs[k % s_->subs.size()].dom->wait(std::min(left, std::chrono::milliseconds(1)));
        if (st != status::timed_out) return st;
      }
    }

    result<std::vector<std::byte>> address() const {
      std::vector<std::vector<std::byte>> blobs;
      detail::routed_address a;
      a.nonce = s_->id.nonce;
      a.node = s_->node;
      a.secret = s_->id.secret;
      for (const auto& sub : s_->subs) {
        auto b = sub.dom->address();
        if (!b) return unexpected(std::move(b).error());
        blobs.push_back(std::move(*b));
      }
      for (std::size_t i = 0; i < s_->subs.size(); ++i)
        a.subs.push_back({s_->subs[i].classes, s_->subs[i].rail, s_->subs[i].dom->provider(),
                          s_->subs[i].choice.transport, blobs[i]});
      return detail::encode_routed_address(a);
    }

    // The host route: the node route for a peer on this node, the net route
    // for one on another (each falling back to the other where it is not
    // configured), each of its rails that the peer has too (rail 0 at
    // least); the device route: the gpu route to a node-mate, else the host
    // route where its provider reaches device memory.
    result<endpoint_impl> connect(std::span<const std::byte> peer, std::uint32_t peer_id) {
      if (!detail::is_routed_address(peer)) return connect_plain(peer, peer_id);
      auto a = detail::decode_routed_address(peer);
      if (!a) return unexpected(std::move(a).error());
      const bool same_node = a->node == s_->node;
      endpoint_impl ep(std::make_unique<endpoint_state>(s_.get(), a->nonce, a->secret, runtime_caps().max_sge));
      route_class want = same_node ? route_class::node : route_class::net;
      const route_class other = same_node ? route_class::net : route_class::node;
      std::string why = same_node ? "peer on this node" : "peer on another node";
      if (s_->route_of(want).rails == 0) {
        why += ", no " + std::string(to_string(want)) + " route configured";
        want = other;
      }
      const detail::routed_class_route& host = s_->route_of(want);
      for (std::size_t rail = 0; rail < host.rails; ++rail) {
        const int mine = host.subs[rail];
        if (rail > 0 && peer_sub(*a, mine, want) < 0) break;  // the peer has fewer rails
        auto e = connect_sub(*a, mine, want, peer_id, why);
        if (!e) return unexpected(std::move(e).error());
        ep->add_rail(endpoint_state::host, mine, e->first, std::move(e->second));
      }
      ep->set_why(endpoint_state::host, why);
      const detail::routed_class_route& gpu_route = s_->route_of(route_class::gpu);
      const int gpu = gpu_route.rails > 0 ? gpu_route.subs[0] : -1;
      const int mine = host.subs[0];
      if (same_node && gpu >= 0 && gpu != mine && peer_has(*a, gpu, route_class::gpu)) {
        auto dev = connect_sub(*a, gpu, route_class::gpu, peer_id, "gpu route to a peer on this node");
        if (!dev) return unexpected(std::move(dev).error());
        ep->add_rail(endpoint_state::device, gpu, dev->first, std::move(dev->second));
        ep->set_why(endpoint_state::device, "gpu route to a peer on this node");
      } else if (s_->subs[static_cast<std::size_t>(mine)].dom->runtime_caps().gpu == gpu_path::direct) {
        ep->share_route(endpoint_state::device, endpoint_state::host,
                        why + "; its provider reaches device memory itself");
      } else {
        ep->set_why(endpoint_state::device, "none: no provider here reaches this peer's device memory");
      }
      if (auto st = connect_staged(*a, *ep.operator->(), peer_id, mine); !st) return unexpected(std::move(st).error());
      return ep;
    }

    // The one provider domain, where this domain has one (no rails);
    // this domain is not used after.
    std::optional<typename Sub::domain_impl> only_provider() && {
      if (s_->subs.size() != 1 || s_->subs[0].is_rail) return std::nullopt;
      return std::move(s_->subs[0].dom);
    }

    provider_id provider() const noexcept { return id; }
    std::uint64_t owner() const noexcept { return s_->id.nonce; }
    // What every host-route provider offers (an operation may go over any
    // of them), the smallest scatter-gather limit, device memory as the
    // best route has it.
    capabilities runtime_caps() const noexcept {
      capabilities c = caps;
      c.gpu = gpu_path::none;
      c.needs_target_progress = false;
      for (const auto& sub : s_->subs) {
        const capabilities k = sub.dom->runtime_caps();
        if ((sub.classes & (detail::class_bit(route_class::node) | detail::class_bit(route_class::net))) != 0) {
          c.rma = c.rma && k.rma;
          c.write_with_imm = c.write_with_imm && k.write_with_imm;
          c.atomics = c.atomics && k.atomics;
          c.send_recv = c.send_recv && k.send_recv;
        }
        c.max_sge = std::min(c.max_sge, k.max_sge);
        c.needs_target_progress = c.needs_target_progress || k.needs_target_progress;
        if (k.gpu == gpu_path::direct || (sub.classes & detail::class_bit(route_class::gpu)) != 0)
          c.gpu = gpu_path::direct;
        else if (k.gpu == gpu_path::staged && c.gpu == gpu_path::none)
          c.gpu = gpu_path::staged;
      }
      return c;
    }
    std::string describe() const {
      std::string d = "routed:";
      for (const auto& sub : s_->subs) {
        d += " [";
        for (auto c : all_route_classes)
          if (sub.classes & detail::class_bit(c)) d += std::string(to_string(c)) + "=";
        d += sub.dom->describe();
        if (const auto pci = sub.dom->device_pci()) d += ", PCI " + *pci;
        if (sub.is_rail) d += " rail " + std::to_string(sub.rail) + (sub.down ? " (down)" : "");
        d += "]";
      }
      return d;
    }

   private:
    explicit domain_impl(std::unique_ptr<state> s) : s_(std::move(s)) {}

    // The provider domains of the host routes, rail 0 each: the node
    // route's, then the net route's where that is another; -1: none.
    std::array<int, 2> host_subs() const noexcept {
      std::array<int, 2> out{-1, -1};
      std::size_t n = 0;
      for (auto c : {route_class::node, route_class::net}) {
        const detail::routed_class_route& route = s_->route_of(c);
        if (route.rails > 0 && (n == 0 || out[0] != route.subs[0])) out[n++] = route.subs[0];
      }
      return out;
    }

    // A peer that is one provider's domain (its own address blob, not a
    // routed one: a program on fabrix::ucx, say): the provider domain of
    // the node route, else of the net route (rail 0), that takes the blob
    // serves its host memory, and its device memory where that provider
    // reaches device memory itself. The queue pair adopts the peer's
    // remote_buffers (routed_endpoint::adopt_remote).
    result<endpoint_impl> connect_plain(std::span<const std::byte> peer, std::uint32_t peer_id) {
      std::string tried;
      for (const int mine : host_subs()) {
        if (mine < 0) continue;
        auto& sub = s_->subs[static_cast<std::size_t>(mine)];
        auto e = sub.dom->connect(peer, peer_id);
        if (!e) {
          tried += (tried.empty() ? "" : "; ") + sub.choice.text() + ": " + e.error().describe();
          continue;
        }
        const auto ident = detail::draw_domain_identity();  // seals the peer's buffers as this queue pair adopts them
        endpoint_impl ep(std::make_unique<endpoint_state>(s_.get(), ident.nonce, ident.secret, runtime_caps().max_sge));
        const std::string why =
            "peer not routed, on its own " + std::string(to_string(sub.dom->provider())) + " domain";
        ep->add_rail(endpoint_state::host, mine, 0, std::move(*e));
        ep->set_why(endpoint_state::host, why);
        ep->set_plain_peer(sub.dom->provider());
        if (sub.dom->runtime_caps().gpu == gpu_path::direct)
          ep->share_route(endpoint_state::device, endpoint_state::host,
                          why + "; its provider reaches device memory itself");
        else
          ep->set_why(endpoint_state::device, "none: the peer's provider does not reach device memory here");
        return ep;
      }
      return unexpected(status::invalid_argument,
                        "connect: not a routed address blob, and no provider domain of this domain's host routes "
                        "takes it as its own (" +
                            tried + ")",
                        std::string(name));
    }

    // Registers [addr, addr + len) in every provider domain that takes its
    // memory kind, except one that `r` already holds (allocate_memory's),
    // and seals the routed remote_buffer over their keys, in domain order.
    result<region_impl> register_in_subs(std::unique_ptr<region_state> r, void* addr, std::size_t len,
                                         memory_location where, access rights) {
      remote_buffer& rb = r->remote;
      rb = detail::describe_region(id, reinterpret_cast<std::uintptr_t>(addr), len, where, rights, s_->id.nonce,
                                   s_->next_epoch++);
      const bool host = where.kind == memory_kind::host;
      constexpr auto host_classes = detail::class_bit(route_class::node) | detail::class_bit(route_class::net);
      std::optional<error> failed;
      bool any = false;
      for (std::size_t i = 0; i < s_->subs.size(); ++i) {
        auto& sub = s_->subs[i];
        const bool serves_host = (sub.classes & host_classes) != 0;
        const bool serves_gpu = (sub.classes & detail::class_bit(route_class::gpu)) != 0;
        const bool direct = sub.dom->runtime_caps().gpu == gpu_path::direct;
        // Device memory a staged provider copies: this process's own, as a
        // local source or destination only (peers never reach it there).
        const bool staging = !host && !direct && (sub.classes & detail::class_bit(route_class::staged)) != 0;
        const bool required = host ? serves_host : serves_gpu;
        const bool tried = required || (host ? serves_gpu : staging || direct);
        if (!tried) continue;
        if (!r->subs[i]) {
          auto reg = sub.dom->register_memory(addr, len, where, staging ? access::local : rights);
          if (!reg) {
            if (required) return unexpected(std::move(reg).error());
            if (!failed) failed = std::move(reg).error();
            continue;
          }
          r->subs[i] = std::move(*reg);
        }
        r->set_local(i);
        any = true;
        if (staging) continue;
        if (!detail::append_routed_key(rb, static_cast<std::uint8_t>(i), r->subs[i]->remote()))
          return unexpected(status::unsupported,
                            "register_memory: the keys of this domain's providers (" + describe() +
                                ") do not fit one remote_buffer (" + std::to_string(remote_buffer::max_key_size) +
                                " bytes)",
                            std::string(name));
      }
      if (!any) {
        if (failed) return unexpected(std::move(*failed));
        return unexpected(status::unsupported,
                          "register_memory: no provider of this domain takes " + std::string(to_string(where.kind)) +
                              " memory (" + describe() + ")",
                          std::string(name));
      }
      rb.seal = rb.compute_seal(s_->id.secret);
      return region_impl(std::move(r));
    }

    // Whether a default route may name provider `n`: one of Ps
    // (routed<Ps...>); for routed<>, any but a "+staged" one not
    // registered (those are never plugins).
    static bool can_open(std::string_view n) {
      if constexpr (is_static) {
        return Sub::has(n);
      } else {
        if (n.find('+') == std::string_view::npos) return true;
        const auto registered = detail::providers_by_priority();
        return std::any_of(registered.begin(), registered.end(), [&](const auto& e) { return e.name == n; });
      }
    }

    // Staged where nothing is direct: the net route's provider staged, where
    // that provider does not reach device memory and the program enabled
    // staged providers (cuda/staged_open.hpp); kept only where it stages
    // (the CUDA engine without a usable GPU says gpu none: nothing to route).
    static void open_default_staged(state& s, const domain_options& opts) {
      const auto& net = s.route_of(route_class::net);
      if (net.rails == 0) return;
      const auto& sub = s.subs[static_cast<std::size_t>(net.subs[0])];
      const route_choice staged{sub.choice.provider + "+staged", sub.choice.transport, {}};
      if (sub.dom->runtime_caps().gpu == gpu_path::direct || !can_open(staged.provider)) return;
      const std::size_t before = s.subs.size();
      if (!open_sub(s, route_class::staged, staged, opts)) return;
      if (s.subs.size() > before && s.subs.back().dom->runtime_caps().gpu != gpu_path::staged) {
        s.subs.pop_back();
        s.classes[static_cast<std::size_t>(route_class::staged)] = {};
      }
    }

    // Opens `choice` for class `c`, one provider domain per device (rail),
    // or shares one already open for the same provider, transport, device
    // and rail.
    static result<void> open_sub(state& s, route_class c, const route_choice& choice, const domain_options& opts) {
      auto& route = s.classes[static_cast<std::size_t>(c)];
      const std::size_t rails = std::max<std::size_t>(choice.devices.size(), 1);
      for (std::size_t rail = 0; rail < rails; ++rail) {
        route_choice one{choice.provider, choice.transport, {}};
        if (!choice.devices.empty()) one.devices.push_back(choice.devices[rail]);
        int found = -1;
        for (std::size_t i = 0; i < s.subs.size(); ++i)
          if (s.subs[i].choice == one && s.subs[i].rail == rail) found = static_cast<int>(i);
        if (found < 0) {
          if (s.subs.size() == detail::routed_max_subs)
            return unexpected(status::invalid_argument,
                              "more than " + std::to_string(detail::routed_max_subs) + " provider domains",
                              std::string(name));
          domain_options o = opts;
          o.provider = one.provider;
          o.transport = one.transport;
          o.device = one.devices.empty() ? std::string() : one.devices[0];
          auto d = Sub::domain_impl::create(o);
          if (!d) return unexpected(std::move(d).error());
          detail::routed_sub<Sub> sub;
          sub.choice = std::move(one);
          sub.rail = static_cast<std::uint8_t>(rail);
          sub.dom = std::move(*d);
          s.subs.push_back(std::move(sub));
          found = static_cast<int>(s.subs.size() - 1);
        }
        auto& sub = s.subs[static_cast<std::size_t>(found)];
        sub.classes |= detail::class_bit(c);
        sub.is_rail = sub.is_rail || rails > 1;
        s.has_rails = s.has_rails || rails > 1;
        route.subs[rail] = found;
      }
      route.rails = static_cast<std::uint8_t>(rails);
      return {};
    }

    // The staged route's provider endpoint, where this domain has one:
    // connected to the peer's host-route provider domain of the same
    // provider and transport (the staged provider's wire is its inner
    // provider's). A peer without one gets no staged route; nor does a peer
    // whose host route is the staged domain itself (`host_sub`: it stages
    // there).
    result<void> connect_staged(const detail::routed_address& a, endpoint_state& ep, std::uint32_t peer_id,
                                int host_sub) {
      const detail::routed_class_route& route = s_->route_of(route_class::staged);
      if (route.rails == 0 || route.subs[0] == host_sub) return {};
      const int mine = route.subs[0];
      for (auto c : {route_class::net, route_class::node}) {
        if (!peer_has(a, mine, c)) continue;
        const std::string why = "staged through host memory: no direct path for it to host memory";
        auto e = connect_sub(a, mine, c, peer_id, why);
        if (!e) return unexpected(std::move(e).error());
        ep.add_rail(endpoint_state::staged, mine, e->first, std::move(e->second));
        ep.set_why(endpoint_state::staged, why);
        return {};
      }
      ep.set_why(endpoint_state::staged, "none: the peer has no domain of the staged provider's");
      return {};
    }

    // The peer's provider domain of the same provider and transport as our
    // sub `mine`, preferring one that serves class `c`; -1 where none.
    int peer_sub(const detail::routed_address& a, int mine, route_class c) const {
      const auto& sub = s_->subs[static_cast<std::size_t>(mine)];
      int found = -1;
      for (std::size_t j = 0; j < a.subs.size(); ++j) {
        if (a.subs[j].provider != sub.dom->provider() || a.subs[j].transport != sub.choice.transport ||
            a.subs[j].rail != sub.rail)
          continue;
        if (a.subs[j].classes & detail::class_bit(c)) return static_cast<int>(j);
        if (found < 0) found = static_cast<int>(j);
      }
      return found;
    }
    bool peer_has(const detail::routed_address& a, int mine, route_class c) const {
      const int j = peer_sub(a, mine, c);
      return j >= 0 && (a.subs[static_cast<std::size_t>(j)].classes & detail::class_bit(c)) != 0;
    }

    // Connects our provider domain `mine` to the peer's matching one: the
    // peer's index, and the provider endpoint.
    result<std::pair<std::uint8_t, typename Sub::endpoint_impl>> connect_sub(const detail::routed_address& a, int mine,
                                                                             route_class c, std::uint32_t peer_id,
                                                                             const std::string& why) {
      const int j = peer_sub(a, mine, c);
      auto& sub = s_->subs[static_cast<std::size_t>(mine)];
      if (j < 0) {
        std::string theirs;
        for (const auto& p : a.subs)
          theirs += (theirs.empty() ? "" : ", ") + std::string(to_string(p.provider)) +
                    (p.transport.empty() ? "" : ":" + p.transport);
        return unexpected(status::invalid_argument,
                          "connect: " + why + ", routed over " + sub.choice.text() +
                              " here, but the peer has no domain of that provider and transport (it has " + theirs +
                              "); give every process the same FABRIX_ROUTE",
                          std::string(name));
      }
      auto e = sub.dom->connect(a.subs[static_cast<std::size_t>(j)].blob, peer_id);
      if (!e) return unexpected(std::move(e).error());
      return std::pair{static_cast<std::uint8_t>(j), std::move(*e)};
    }

    std::unique_ptr<state> s_;
  };
};

}  // namespace fabrix::detail

namespace fabrix {

// routed<>: over the providers it opens by name at run time (those
// compiled in and the plugins; open("routed") and open("auto") open it).
// routed<Ps...>: over exactly Ps (fabrix::ucx::provider, ...), each
// provider domain held by type, so that an operation reaches its
// provider's post() without a virtual call. Routes name providers of Ps
// only; the default routes (above) pick among Ps: node = ucx, else ofi:shm,
// where one of Ps; net = the first of Ps, in the order written, that is a
// network provider (not cuda_ipc, not "+staged") and opens; gpu =
// cuda_ipc; staged = "<net provider>+staged" where that is one of Ps. Both
// are the same provider on the wire: a routed<Ps...> process and an
// open("auto") one connect to each other where their routes meet.
template <provider... Ps>
struct routed : detail::routed_provider<detail::one_of<Ps...>> {};
template <>
struct routed<> : detail::routed_provider<any_provider> {};

static_assert(provider<routed<>>, "routed must satisfy the provider concept");
static_assert(checks_host_memory<routed<>>);

namespace detail {
// Not a provider of the registry (any_provider.hpp, routed_opener): its
// name is known, so its remote_buffers decode, and open("routed") opens it.
// open("auto"): routed over its default routes, or its one provider domain.
inline result<std::unique_ptr<any_domain_base>> open_routed_for_auto(const domain_options& opts) {
  auto d = routed<>::domain_impl::create(opts);
  if (!d) return unexpected(std::move(d).error());
  if (auto one = std::move(*d).only_provider()) return std::move(*one).release_base();
  return std::unique_ptr<any_domain_base>(new any_domain_model<routed<>>(std::move(*d)));
}

inline const bool routed_registered = [] {
  routed_opener = &open_erased<routed<>>;
  routed_auto_opener = &open_routed_for_auto;
  return register_provider_name(routed<>::name).has_value();
}();
}  // namespace detail

}  // namespace fabrix
