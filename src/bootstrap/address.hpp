// "host:port" strings (internal): parsing and printing.
#pragma once

#include <fabrix/result.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace fabrix::detail::boot {

struct host_port {
  std::string host;  // a name, an IPv4 address or an IPv6 address (without brackets)
  std::uint16_t port = 0;
};

// Accepts "host:port", "1.2.3.4:port" and "[v6addr]:port"; the port is
// decimal 0-65535. `what` names the origin of the text in error messages
// (a variable name, "root address", ...).
result<host_port> parse_host_port(std::string_view text, std::string_view what);

// The inverse of parse_host_port: brackets around IPv6 addresses.
std::string format_host_port(std::string_view host, std::uint16_t port);

}  // namespace fabrix::detail::boot
