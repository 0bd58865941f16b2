// fabrix::route_config — which provider a routed domain (routed.hpp) uses
// for which kind of traffic, written as text:
//
//   "node=ucx:sysv,posix,cma net=ofi:tcp;ofi_rxm gpu=cuda_ipc"
//
// Items are separated by spaces; each is <class>=<provider>[:<transport>]
// (the transport as domain_options::transport takes it: a UCX_TLS list, a
// libfabric provider name). The classes:
//   node  host memory of a peer on this node (process_identity.hpp's node)
//   net   host memory of a peer on another node
//   gpu   device memory of a peer on this node
// Device memory of a peer on another node goes over `net` where that
// provider reaches device memory itself (runtime_caps().gpu == direct).
// A class left out falls back: node to net, net to node, gpu to the host
// route. Two classes naming the same provider and transport share one
// sub-domain.
//
// Where the text comes from, first that is set: FABRIX_ROUTE,
// domain_options::transport of the routed domain, else the default (below).
#pragma once

#include <fabrix/result.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fabrix {

enum class route_class : std::uint8_t { node = 0, net = 1, gpu = 2 };
inline constexpr std::size_t route_classes = 3;

constexpr std::string_view to_string(route_class c) noexcept {
  switch (c) {
    case route_class::node: return "node";
    case route_class::net: return "net";
    case route_class::gpu: return "gpu";
  }
  return "unknown";
}

struct route_choice {
  std::string provider;
  std::string transport;  // empty: the provider's default
  bool operator==(const route_choice&) const = default;
  std::string text() const { return transport.empty() ? provider : provider + ":" + transport; }
};

struct route_config {
  std::array<std::optional<route_choice>, route_classes> routes;

  std::optional<route_choice>& operator[](route_class c) noexcept { return routes[static_cast<std::size_t>(c)]; }
  const std::optional<route_choice>& operator[](route_class c) const noexcept {
    return routes[static_cast<std::size_t>(c)];
  }

  // invalid_argument, naming the item, for anything but the grammar above
  // (an unknown class, a class given twice, an empty provider).
  static result<route_config> parse(std::string_view text) {
    route_config c;
    std::size_t i = 0;
    while (i < text.size()) {
      if (text[i] == ' ') {
        ++i;
        continue;
      }
      const std::size_t end = std::min(text.find(' ', i), text.size());
      const std::string_view item = text.substr(i, end - i);
      i = end;
      auto bad = [&](const char* why) {
        return unexpected(status::invalid_argument, "route '" + std::string(item) + "': " + why, "routed");
      };
      const std::size_t eq = item.find('=');
      if (eq == std::string_view::npos) return bad("expected <class>=<provider>[:<transport>]");
      const std::string_view cls = item.substr(0, eq);
      std::optional<route_class> which;
      for (auto k : {route_class::node, route_class::net, route_class::gpu})
        if (cls == to_string(k)) which = k;
      if (!which) return bad("the class is node, net or gpu");
      if (c[*which]) return bad("this class is given twice");
      const std::string_view rest = item.substr(eq + 1);
      const std::size_t colon = rest.find(':');
      route_choice r{std::string(rest.substr(0, colon)),
                     colon == std::string_view::npos ? std::string() : std::string(rest.substr(colon + 1))};
      if (r.provider.empty()) return bad("no provider named");
      if (r.transport.size() > 255) return bad("the transport is longer than 255 characters");
      if (r.provider == "routed" || r.provider == "auto" || r.provider == "any")
        return bad("a route names one provider, not routed, auto or any");
      c[*which] = std::move(r);
    }
    if (!c[route_class::node] && !c[route_class::net])
      return unexpected(status::invalid_argument, "route '" + std::string(text) + "': names neither node nor net",
                        "routed");
    return c;
  }

  std::string text() const {
    std::string t;
    for (auto k : {route_class::node, route_class::net, route_class::gpu}) {
      if (!(*this)[k]) continue;
      if (!t.empty()) t += ' ';
      t += std::string(to_string(k)) + "=" + (*this)[k]->text();
    }
    return t;
  }
};

}  // namespace fabrix
