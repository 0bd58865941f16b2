// Checks a host range against this process's mappings before it is
// registered, so that a peer's write can never be aimed at memory that is
// unmapped or not writable (the target would die of SIGSEGV inside the
// provider's progress). Costs one read of /proc/self/maps per registration;
// nothing on the data path.
#pragma once

#include <fabrix/memory.hpp>
#include <fabrix/status.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace fabrix::detail {

struct range_verdict {
  fabrix::status status = status::ok;
  std::string why;  // empty when ok
};

// One line of /proc/self/maps: "start-end perms offset dev inode path".
struct mapping {
  std::uintptr_t start = 0;
  std::uintptr_t end = 0;
  bool readable = false;
  bool writable = false;
};

inline bool parse_mapping(std::string_view line, mapping& m) {
  std::size_t i = 0;
  auto hex = [&](std::uintptr_t& v) {
    const std::size_t from = i;
    v = 0;
    for (; i < line.size(); ++i) {
      const char c = line[i];
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (d < 0) break;
      v = v * 16 + static_cast<std::uintptr_t>(d);
    }
    return i > from;
  };
  if (!hex(m.start) || i >= line.size() || line[i++] != '-' || !hex(m.end)) return false;
  if (i + 3 > line.size() || line[i] != ' ') return false;
  m.readable = line[i + 1] == 'r';
  m.writable = line[i + 2] == 'w';
  return m.start < m.end;
}

inline std::string hex_text(std::uintptr_t v) {
  char buf[2 + 16 + 1];
  std::snprintf(buf, sizeof buf, "0x%zx", static_cast<std::size_t>(v));
  return buf;
}

// Whether [addr, addr+len) is wholly mapped in this process, readable, and
// writable when `rights` lets peers write into it (remote_write,
// remote_atomic). Read-only memory may still be registered for local use
// and remote_read (a send source, a published table).
inline range_verdict check_host_range(const void* addr, std::size_t len, access rights) {
  const auto begin = reinterpret_cast<std::uintptr_t>(addr);
  if (len > UINTPTR_MAX - begin)
    return {status::invalid_argument,
            "length " + std::to_string(len) + " at " + hex_text(begin) + " overflows the address space"};
  const std::uintptr_t end = begin + len;
  const bool need_write = (static_cast<std::uint32_t>(rights) &
                           static_cast<std::uint32_t>(access::remote_write | access::remote_atomic)) != 0;

  const int fd = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};           // no procfs (a chroot, a sandbox): the provider's own checks remain
  std::uintptr_t covered = begin;  // [begin, covered) is mapped and allowed so far
  range_verdict verdict{status::invalid_argument, ""};
  std::string pending;
  char buf[8192];
  bool done = false;
  while (!done) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, static_cast<std::size_t>(n));
    std::size_t from = 0;
    for (std::size_t nl; !done && (nl = pending.find('\n', from)) != std::string::npos; from = nl + 1) {
      mapping m;
      if (!parse_mapping(std::string_view(pending).substr(from, nl - from), m)) continue;
      if (m.end <= covered) continue;  // lines are sorted by address
      if (m.start > covered)
        done = true;  // a hole at `covered`
      else if (!m.readable) {
        verdict = {status::access_denied, "memory at " + hex_text(covered) + " is not readable"};
        done = true;
      } else if (need_write && !m.writable) {
        verdict = {status::access_denied,
                   "memory at " + hex_text(covered) + " is read-only but remote_write/remote_atomic was asked"};
        done = true;
      } else {
        covered = m.end;
        if (covered >= end) {
          verdict = {};
          done = true;
        }
      }
    }
    pending.erase(0, from);
  }
  ::close(fd);
  if (verdict.status == status::invalid_argument && verdict.why.empty())
    verdict.why = "[" + hex_text(begin) + ", " + hex_text(end) + ") is not mapped in this process (from " +
                  hex_text(covered) + ")";
  return verdict;
}

}  // namespace fabrix::detail
