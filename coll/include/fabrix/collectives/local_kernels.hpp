// Chooses the kernel set of a collective call from where its buffers are:
// host_kernels (reduce.hpp) for host memory, the communicator's
// device_kernels (device_kernels.hpp) for device memory. The buffers must
// be in the memory the communicator's scratch is in (options::device).
#pragma once

#include <fabrix/collectives/communicator.hpp>
#include <fabrix/collectives/device_kernels.hpp>
#include <fabrix/collectives/reduce.hpp>

#include <string>

namespace fabrix::coll::detail {

inline std::string describe(memory_location m) {
  std::string s(to_string(m.kind));
  if (m.kind != memory_kind::host) s += " " + std::to_string(m.device);
  return s;
}

// Runs body(k) with the kernel set for `where` and returns its result; once
// it has run, waits for the kernels (the output is complete on return).
template <provider P, class Body>
result<void> with_kernels(communicator<P>& c, memory_location where, const char* what, Body&& body) {
  const memory_location mine = c.memory();
  if (where.kind != mine.kind || (where.kind != memory_kind::host && where.device != mine.device))
    return unexpected(status::unsupported,
                      std::string(what) + ": the buffers are in " + describe(where) +
                          " memory but this communicator's " + "scratch is in " + describe(mine) +
                          " memory (options::device chooses it)",
                      "collectives");
  if (c.device() == nullptr) {
    host_kernels k;
    return body(k);
  }
  device_adapter k(*c.device());
  auto r = body(k);
  if (auto done = k.ready(); !done && r) return c.fail(done.error());
  return r;
}

}  // namespace fabrix::coll::detail
