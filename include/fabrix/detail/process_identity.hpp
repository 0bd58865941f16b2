// Which process a peer is, which node it runs on, and whether it still runs.
//
// "Same node" is what two processes may assume of each other beyond the
// network: fabrix uses it for exactly two things, and only between processes
// on the same node:
//   - the /proc liveness check (process_gone below), for transports that
//     cannot report a dead peer themselves (shared memory): the peer's pid
//     and start time are looked up in this process's /proc;
//   - shared-memory paths: UCX may choose sysv/posix/cma, and the key tables
//     in /dev/shm (key_table.hpp) are opened.
// Between nodes only the network transport is used, and it reports a dead
// peer itself.
//
// The node is a hash of
//   - this kernel boot (/proc/sys/kernel/random/boot_id) and the pid
//     namespace, always: only then are a peer's pid and /proc entry
//     comparable, which the liveness check needs;
//   - the host: FABRIX_NODE_ID when set and not empty (any string, hashed as
//     given), else the host name (gethostname, the UTS namespace's) and the
//     network namespace (/proc/self/ns/net).
// So processes in other network namespaces or with another host name count
// as other nodes even on one kernel: containers, and the simulated nodes of
// tests/nodes (network + UTS namespaces, which share the boot id), reach each
// other over the network as two machines would. FABRIX_NODE_ID sets processes
// of one host apart (different values) or joins processes that differ only in
// host name or network namespace (one value); it never joins processes of
// another kernel boot or pid namespace. Gone, a zombie, or a new process with
// the same pid (start time differs) all count as dead.
#pragma once

#include <fabrix/detail/env.hpp>
#include <fabrix/detail/fnv1a.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <unistd.h>

namespace fabrix::detail {

struct process_identity {
  std::uint64_t node = 0;  // node_id(): boot id, pid namespace, and host (see the top of this file)
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

// The target of a /proc/self/ns link, e.g. "net:[4026531840]"; empty when unreadable.
inline std::string namespace_of(const char* link) {
  char buf[128] = {};
  const ssize_t n = ::readlink(link, buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
}

// The text node_id() hashes (tests and diagnostics read it).
inline std::string node_description() {
  std::string where = "boot ";
  if (std::FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    char buf[64] = {};
    const std::size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
    std::fclose(f);
    where.append(buf, n);
    while (!where.empty() && where.back() == '\n') where.pop_back();
  }
  where += ", " + namespace_of("/proc/self/ns/pid");
  if (const char* id = env_text("FABRIX_NODE_ID")) {
    where += ", FABRIX_NODE_ID=";
    where += id;
    return where;
  }
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  where += ", host ";
  where += host;
  where += ", " + namespace_of("/proc/self/ns/net");
  return where;
}

// This process's node; two processes with the same value are on the same node.
inline std::uint64_t node_id() { return fnv1a(node_description()); }

inline process_identity self_identity() {
  process_identity id;
  id.pid = static_cast<std::uint32_t>(::getpid());
  char state = 0;
  read_proc_stat(id.pid, state, id.start_time);
  id.node = node_id();
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
