// Which process a peer is, and whether it still runs — for providers whose
// transport cannot report a dead peer on this node (shared memory). Gone, a
// zombie, or a new process with the same pid (start time differs) all count
// as dead. "This node" means the same kernel boot and the same pid namespace:
// only then are the peer's pid and /proc comparable.
#pragma once

#include <fabrix/detail/fnv1a.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <unistd.h>

namespace fabrix::detail {

struct process_identity {
  std::uint64_t node = 0;  // hash of this boot's /proc/sys/kernel/random/boot_id and pid namespace
  std::uint32_t pid = 0;
  std::uint64_t start_time = 0;  // /proc/<pid>/stat field 22 (clock ticks after boot)
};

// State letter and start time from /proc/<pid>/stat; false when unreadable.
inline bool read_proc_stat(std::uint32_t pid, char& state, std::uint64_t& start_time) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return false;
  char buf[1024];
  const std::size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* p = std::strrchr(buf, ')');  // the command name may hold spaces and parens
  if (!p || p[1] != ' ') return false;
  p += 2;
  state = *p;
  for (int field = 3; field < 22; ++field) {  // p is at field 3; skip to field 22
    p = std::strchr(p, ' ');
    if (!p) return false;
    ++p;
  }
  start_time = std::strtoull(p, nullptr, 10);
  return true;
}

inline process_identity self_identity() {
  process_identity id;
  id.pid = static_cast<std::uint32_t>(::getpid());
  char state = 0;
  read_proc_stat(id.pid, state, id.start_time);
  std::string where;
  if (std::FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    char buf[64] = {};
    where.append(buf, std::fread(buf, 1, sizeof(buf) - 1, f));
    std::fclose(f);
  }
  char ns[128] = {};
  const ssize_t n = ::readlink("/proc/self/ns/pid", ns, sizeof(ns) - 1);  // "pid:[4026531836]"
  if (n > 0) where.append(ns, static_cast<std::size_t>(n));
  id.node = fnv1a(where);
  return id;
}

// True when `peer` (a process on this node) no longer runs.
inline bool process_gone(const process_identity& peer) {
  char state = 0;
  std::uint64_t start = 0;
  if (!read_proc_stat(peer.pid, state, start)) return true;
  return state == 'Z' || state == 'X' || start != peer.start_time;
}

}  // namespace fabrix::detail
