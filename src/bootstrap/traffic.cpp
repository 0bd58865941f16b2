// socket_traffic(): TCP's own byte counters. Its own file because
// <linux/tcp.h> (which has tcpi_bytes_acked/received) and <netinet/tcp.h>
// cannot be included together.
#include "socket.hpp"

#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>

namespace fabrix::detail::boot {

bootstrap_traffic socket_traffic(int fd) noexcept {
  tcp_info info{};
  socklen_t len = sizeof info;
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return {};
  // Older kernels fill a shorter structure: count only what they filled.
  bootstrap_traffic t;
  if (len >= offsetof(tcp_info, tcpi_bytes_acked) + sizeof info.tcpi_bytes_acked) t.bytes_sent = info.tcpi_bytes_acked;
  if (len >= offsetof(tcp_info, tcpi_bytes_received) + sizeof info.tcpi_bytes_received)
    t.bytes_received = info.tcpi_bytes_received;
  return t;
}

}  // namespace fabrix::detail::boot
