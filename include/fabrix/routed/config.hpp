// fabrix::route_config — which provider a routed domain (routed.hpp) uses
// for which kind of traffic, written as text:
//
//   "node=ucx:sysv,posix,cma net=ofi:tcp;ofi_rxm gpu=cuda_ipc"
//
// Items are separated by spaces; each is
// <class>=<provider>[:<transport>][@<device>[,<device>...]] (the transport
// as domain_options::transport takes it: a UCX_TLS list, a libfabric
// provider name; a device as domain_options::device: a libfabric domain
// such as an interface name, a verbs device). The classes:
//   node  host memory of a peer on this node (process_identity.hpp's node)
//   net   host memory of a peer on another node
//   gpu   device memory of a peer on this node
//   staged  this process's device memory as the source or destination of
//         an operation on a peer's host memory, where the host route's
//         provider does not reach device memory itself: a
//         "<provider>+staged" provider (cuda/staged_open.hpp) that copies it
//         through host memory and talks to the peer's plain domain of that
//         provider (the same provider and transport as the net route)
// Device memory of a peer on another node goes over `net` where that
// provider reaches device memory itself (runtime_caps().gpu == direct);
// staging cannot reach it (a peer's device memory is never staged). A
// class left out falls back: node to net, net to node, gpu to the host
// route, staged to none. Two classes naming the same provider and
// transport share one sub-domain.
//
// Rails: a node or net route naming two to routed_max_rails devices
// ("net=ofi:tcp@eth0,eth1") opens one provider domain per device, a rail
// each; rail i connects to the peer's rail i (devices are named per host,
// rails by position). Large writes and reads are striped over the rails
// (routed/endpoint.hpp); every process of the job names the same number.
//
// Where the text comes from, first that is set: FABRIX_ROUTE,
// domain_options::transport of the routed domain, else the default (below).
#pragma once

#include <fabrix/result.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fabrix {

enum class route_class : std::uint8_t { node = 0, net = 1, gpu = 2, staged = 3 };
inline constexpr std::size_t route_classes = 4;
inline constexpr route_class all_route_classes[] = {route_class::node, route_class::net, route_class::gpu,
                                                    route_class::staged};
inline constexpr std::size_t routed_max_rails = 4;

constexpr std::string_view to_string(route_class c) noexcept {
  switch (c) {
    case route_class::node: return "node";
    case route_class::net: return "net";
    case route_class::gpu: return "gpu";
    case route_class::staged: return "staged";
  }
  return "unknown";
}

struct route_choice {
  std::string provider;
  std::string transport;             // empty: the provider's default
  std::vector<std::string> devices;  // empty: the provider's choice; two or more: rails
  bool operator==(const route_choice&) const = default;
  std::string text() const {
    std::string t = transport.empty() ? provider : provider + ":" + transport;
    for (std::size_t i = 0; i < devices.size(); ++i) t += (i == 0 ? "@" : ",") + devices[i];
    return t;
  }
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
      auto bad = [&](const std::string& why) {
        return unexpected(status::invalid_argument, "route '" + std::string(item) + "': " + why, "routed");
      };
      const std::size_t eq = item.find('=');
      if (eq == std::string_view::npos) return bad("expected <class>=<provider>[:<transport>]");
      const std::string_view cls = item.substr(0, eq);
      std::optional<route_class> which;
      for (auto k : all_route_classes)
        if (cls == to_string(k)) which = k;
      if (!which) return bad("the class is node, net, gpu or staged");
      if (c[*which]) return bad("this class is given twice");
      const std::string_view value = item.substr(eq + 1);
      const std::size_t at = value.find('@');
      const std::string_view rest = value.substr(0, at);
      const std::size_t colon = rest.find(':');
      route_choice r{std::string(rest.substr(0, colon)),
                     colon == std::string_view::npos ? std::string() : std::string(rest.substr(colon + 1)),
                     {}};
      if (r.provider.empty()) return bad("no provider named");
      if (at != std::string_view::npos) {
        std::string_view list = value.substr(at + 1);
        while (true) {
          const std::size_t comma = list.find(',');
          const std::string_view d = list.substr(0, comma);
          if (d.empty()) return bad("an empty device name");
          if (std::find(r.devices.begin(), r.devices.end(), d) != r.devices.end()) return bad("a device named twice");
          r.devices.emplace_back(d);
          if (comma == std::string_view::npos) break;
          list = list.substr(comma + 1);
        }
        if (r.devices.size() > routed_max_rails)
          return bad("at most " + std::to_string(routed_max_rails) + " devices (rails) per route");
        if (r.devices.size() > 1 && *which != route_class::node && *which != route_class::net)
          return bad("rails are for the node and net routes");
      }
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
    for (auto k : all_route_classes) {
      if (!(*this)[k]) continue;
      if (!t.empty()) t += ' ';
      t += std::string(to_string(k)) + "=" + (*this)[k]->text();
    }
    return t;
  }
};

}  // namespace fabrix
