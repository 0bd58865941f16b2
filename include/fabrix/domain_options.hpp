// fabrix::domain_options — how to open a domain, for every provider.
#pragma once

#include <cstddef>
#include <string>

namespace fabrix {

struct domain_options {
  // Which provider any_provider / fabrix::open() picks: a name ("ucx",
  // "verbs", ...) or "auto" (the best registered one). Static providers ignore it.
  std::string provider = "auto";
  // Provider-specific transport selection; empty means the provider's default.
  // UCX: a UCX_TLS list ("tcp", "sysv,posix,cma", ...); libfabric: a provider name.
  std::string transport;
  // Device name ("mlx5_0", "eth0", ...); empty means the provider's choice.
  std::string device;
  // Operations in flight per domain before posting returns status::again.
  // Posted recv()s do not count here: they have their own bound below.
  std::size_t max_outstanding = 8192;
  // recv()s posted and not yet completed per domain before recv() returns
  // status::again. Sends and one-sided operations never wait behind them.
  std::size_t max_posted_recvs = 1024;
  // Whether wait() may sleep on a wake-up object (a file descriptor the
  // provider signals) until a completion arrives. false, for programs that
  // drive progress with poll() only (as perftest and fabtests' pingpong do by
  // default): a provider whose wake-up object costs something per completion
  // opens none — libfabric's completion queue opens with FI_WAIT_NONE
  // instead of FI_WAIT_FD, about 1 us less per message over tcp;ofi_rxm —
  // and its wait() then polls in slices of at most 1 ms. Same results and
  // statuses either way. Providers whose object costs nothing until armed
  // (UCX, verbs, cuda_ipc) ignore it.
  bool wakeup = true;
};

}  // namespace fabrix
