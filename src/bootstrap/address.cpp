#include "address.hpp"

namespace fabrix::detail::boot {

namespace {
unexpected bad(std::string_view text, std::string_view what, std::string_view why) {
  std::string m(what);
  m += "='";
  m += text;
  m += "' is not a valid host:port: ";
  m += why;
  return {status::invalid_argument, std::move(m), "bootstrap"};
}
}  // namespace

result<host_port> parse_host_port(std::string_view text, std::string_view what) {
  std::string_view host;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string_view::npos) return bad(text, what, "missing ']'");
    host = text.substr(1, close - 1);
    const auto rest = text.substr(close + 1);
    if (rest.empty() || rest.front() != ':') return bad(text, what, "expected ':port' after ']'");
    port = rest.substr(1);
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string_view::npos) return bad(text, what, "missing ':port'");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) return bad(text, what, "write IPv6 addresses as [addr]:port");
  }
  if (host.empty()) return bad(text, what, "empty host");
  if (port.empty() || port.size() > 5) return bad(text, what, "port must be 0-65535");
  unsigned value = 0;
  for (char c : port) {
    if (c < '0' || c > '9') return bad(text, what, "port must be 0-65535");
    value = value * 10 + static_cast<unsigned>(c - '0');
  }
  if (value > 65535) return bad(text, what, "port must be 0-65535");
  return host_port{std::string(host), static_cast<std::uint16_t>(value)};
}

std::string format_host_port(std::string_view host, std::uint16_t port) {
  std::string out;
  const bool v6 = host.find(':') != std::string_view::npos;
  if (v6) out += '[';
  out += host;
  if (v6) out += ']';
  out += ':';
  out += std::to_string(port);
  return out;
}

}  // namespace fabrix::detail::boot
