// Opening the libfabric objects of a domain: fi_getinfo for FI_EP_RDM with
// FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC, then fabric, domain, completion
// queue (FI_CQ_FORMAT_DATA, FI_WAIT_FD when the provider has it), address
// vector and one endpoint bound to both.
//
// Provider choice: domain_options::transport names a libfabric provider as
// fi_info prints it ("tcp;ofi_rxm", "shm", "verbs;ofi_rxm", "efa", ...);
// empty takes the first match libfabric offers (FI_PROVIDER in the
// environment narrows it as usual). domain_options::device names a
// libfabric domain ("eth0", "lo", "mlx5_0").
//
// Memory registration modes: we tell libfabric we handle FI_MR_LOCAL,
// FI_MR_VIRT_ADDR, FI_MR_ALLOCATED, FI_MR_PROV_KEY and FI_MR_ENDPOINT; the
// provider keeps the bits it needs and the domain honours each of them
// (see domain.hpp). Providers needing anything else (FI_MR_RAW keys,
// FI_MR_MMU_NOTIFY, FI_MR_RMA_EVENT, FI_RX_CQ_DATA mode) are not offered.
#pragma once

#include <fabrix/detail/env.hpp>
#include <fabrix/detail/little_endian.hpp>
#include <fabrix/detail/topology.hpp>
#include <fabrix/domain_options.hpp>
#include <fabrix/ofi/detail/progress.hpp>
#include <fabrix/ofi/detail/state.hpp>
#include <fabrix/ofi/detail/status.hpp>

#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>

#include <dirent.h>
#include <dlfcn.h>
#include <net/if.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace fabrix::ofi::detail {

inline constexpr std::uint64_t handled_mr_mode =
    FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
inline constexpr std::uint32_t api_version = FI_VERSION(1, 17);

inline char* dup_string(const std::string& s) {
  char* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (p) std::memcpy(p, s.c_str(), s.size() + 1);
  return p;
}

// Whether to ask libfabric for FI_HMEM (CUDA device memory registered
// natively). FABRIX_OFI_HMEM=0 never, =1 always; unset: only where a CUDA
// driver (libcuda.so.1) can be loaded — on a machine without one, asking
// would only narrow the choice (shm's FI_HMEM variant has no atomics).
inline bool want_hmem() {
  if (const char* v = fabrix::detail::env_text("FABRIX_OFI_HMEM")) return std::strcmp(v, "0") != 0;
  void* h = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (h == nullptr) return false;
  ::dlclose(h);
  return true;
}

// Every FI_EP_RDM provider libfabric offers for fabrix's needs, in its
// order of preference, with FI_HMEM (and FI_MR_HMEM handled) when `hmem` and
// FI_SOURCE (CQ entries name their sender) when `source`. Null info: none.
// domain_options::device is not passed as a hint: rxm 1.17 ignores it and
// answers with its own first domain, so find_provider filters by name.
inline int query_provider(const domain_options& opts, bool hmem, bool source, fi_info** info) {
  fi_info* hints = fi_allocinfo();
  if (!hints) return -FI_ENOMEM;
  hints->caps = FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC | (hmem ? FI_HMEM : 0) | (source ? FI_SOURCE : 0);
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->ep_attr->type = FI_EP_RDM;
  hints->domain_attr->mr_mode = static_cast<int>(handled_mr_mode | (hmem ? FI_MR_HMEM : 0));
  hints->domain_attr->threading = FI_THREAD_DOMAIN;
  if (!opts.transport.empty()) hints->fabric_attr->prov_name = dup_string(opts.transport);
  const int ret = fi_getinfo(api_version, nullptr, nullptr, 0, hints, info);
  fi_freeinfo(hints);
  return ret;
}

// Asks ofi_rxm for a shared receive context (FI_OFI_RXM_USE_SRX=1) unless
// the environment already says otherwise. Why: libfabric 1.17's rxm over
// verbs defaults to a receive queue per connection, and when a connection
// closes (the peer left, or our own fi_close) while receive completions
// from it are still queued, rxm reposts their buffers to the connection's
// endpoint after closing it: SIGSEGV in fi_cq_read or fi_close. On rxe0,
// the conformance case of peers that leave while rank 0 still writes to
// them crashed in 10 of 10 runs with rxm's default, 0 of 15 with the shared
// context, whose buffers go back to one receive context that lives as long
// as the rxm endpoint. Over tcp, rxm uses the shared context by default.
// rxm reads the variable at fi_getinfo and again at fi_endpoint, so it is
// set before the first query. setenv is not thread-safe against getenv or
// setenv in another thread at the same moment (as for every libfabric
// parameter).
inline void prefer_rxm_shared_receive_context() { ::setenv("FI_OFI_RXM_USE_SRX", "1", 0); }

// Turns libfabric's memory-registration cache off (FI_MR_CACHE_MAX_COUNT=0)
// unless the environment already sets it. Why: with the cache, fi_close of
// a region leaves its memory registered with the NIC for reuse, so a peer
// holding the old key still writes into memory its owner has released and
// freed (libfabric 1.17's verbs provider on rxe0: conformance
// `release-under-writes` found bytes written after the release returned in
// 5 of 15 runs; 0 of 15 without the cache) — and a peer on another node,
// which has no key table to check, could do so at any later time. fabrix
// registers a region once, not per operation, so the cache bought its data
// path nothing (the same reasoning as UCX's UCX_IB_REG_METHODS=direct,
// providers/ucx). libfabric reads the variable when it initialises (the
// first fi_getinfo of the process), so it is set before the first query;
// a process that used libfabric before fabrix keeps its cache. setenv: as
// above.
inline void registrations_end_with_their_region() { ::setenv("FI_MR_CACHE_MAX_COUNT", "0", 0); }

// The first entry of `list` whose domain is `device` (any, when empty).
inline fi_info* first_on_device(fi_info* list, const std::string& device) {
  for (fi_info* i = list; i; i = i->next)
    if (device.empty() || (i->domain_attr->name && device == i->domain_attr->name)) return i;
  return nullptr;
}

// device "pci:<bus id>": of the domains `list` offers, the one named after
// the network device closest to that PCI function (an RDMA device or an
// interface: verbs and tcp name their domains so; core
// detail/topology.hpp). nullptr, with `why`, when no offered domain is a
// device on PCI.
inline fi_info* closest_on_pci(fi_info* list, const std::string& bus_id, std::string& why) {
  const std::string sysfs = fabrix::detail::sysfs_root();
  const auto near = fabrix::detail::devices_near(sysfs, bus_id);
  for (const auto& n : near)
    if (fi_info* i = first_on_device(list, n.name)) return i;
  why = near.empty() ? "no PCI function " + bus_id + " under " + sysfs + ", or no network device on PCI"
                     : "none of the " + std::to_string(near.size()) +
                           " network devices on PCI (closest: " + near.front().name + ") is a domain libfabric offers";
  return nullptr;
}

// Refuses a domain_options::device that libfabric does not offer, naming
// what it offers: invalid_argument when no such interface exists here,
// unsupported when it exists but the provider does not offer it (tcp 1.17
// leaves out the loopback interface unless FI_TCP_IFACE names it).
inline unexpected no_such_device(const domain_options& opts, fi_info* list) {
  std::string offered;
  for (fi_info* i = list; i; i = i->next) {
    const std::string name = i->domain_attr->name ? i->domain_attr->name : "";
    if (name.empty() || (" " + offered + ",").find(" " + name + ",") != std::string::npos) continue;
    offered += offered.empty() ? name : ", " + name;
  }
  const bool exists = ::if_nametoindex(opts.device.c_str()) != 0;
  std::string why = "device '" + opts.device + "' " +
                    (exists ? "is a network interface here, but libfabric provider" : "does not exist; provider") +
                    " '" + (opts.transport.empty() ? std::string("(any)") : opts.transport) + "' offers " +
                    (offered.empty() ? std::string("no domain") : offered);
  if (exists && opts.device == "lo" && (opts.transport.empty() || opts.transport.find("tcp") != std::string::npos))
    why += " (tcp: set FI_TCP_IFACE=lo before the first domain to use loopback)";
  return unexpected(exists ? status::unsupported : status::invalid_argument, why, "ofi");
}

// `hmem` says whether the chosen provider registers CUDA memory (FI_HMEM),
// `source` whether its CQ names senders (FI_SOURCE).
inline result<fi_info*> find_provider(const domain_options& opts, bool& hmem, bool& source) {
  prefer_rxm_shared_receive_context();
  registrations_end_with_their_region();
  fi_info* info = nullptr;
  int ret = -FI_ENODATA;
  hmem = false;
  source = false;
  const bool try_hmem = want_hmem();
  // Preference: FI_SOURCE with FI_HMEM, FI_SOURCE alone, then without FI_SOURCE.
  for (const bool src : {true, false}) {
    for (const bool hm : {true, false}) {
      if (hm && !try_hmem) continue;
      ret = query_provider(opts, hm, src, &info);
      if (ret == 0 && info != nullptr) break;
      if (info) fi_freeinfo(info);
      info = nullptr;
      if (ret == -FI_ENOMEM) return unexpected(status::no_memory, "fi_allocinfo", "ofi");
    }
    if (info) break;
  }
  if (ret != 0 || info == nullptr) {
    const std::string what = opts.transport.empty() ? std::string("any provider") : "provider '" + opts.transport + "'";
    return fail(ret != 0 ? ret : -FI_ENODATA,
                "fi_getinfo found no FI_EP_RDM endpoint with RMA, atomics and tagged messages for " + what);
  }
  // The first match (on the device asked for) is libfabric's preference; keep only it.
  const auto bus = fabrix::detail::near_pci(opts.device);
  std::string why_device;
  fi_info* match = bus ? closest_on_pci(info, *bus, why_device) : first_on_device(info, opts.device);
  if (match == nullptr && bus) {
    fi_freeinfo(info);
    return unexpected(status::invalid_argument, "device '" + opts.device + "': " + why_device, "ofi");
  }
  if (match == nullptr) {
    auto e = no_such_device(opts, info);
    fi_freeinfo(info);
    return e;
  }
  hmem = (match->caps & FI_HMEM) != 0;
  source = (match->caps & FI_SOURCE) != 0;
  fi_info* chosen = fi_dupinfo(match);
  fi_freeinfo(info);
  if (!chosen) return unexpected(status::no_memory, "fi_dupinfo", "ofi");
  // shm 1.17 reads a peer's memory itself (process_vm_readv, its "fast
  // RMA") for a read without ordering bits or FI_DELIVERY_COMPLETE, and
  // then nothing at the target checks the key or the range. fabrix lets it
  // only for reads whose range the target's key table confirms, inside the
  // access board; every other read carries FI_DELIVERY_COMPLETE and goes to
  // the target, which checks it (post.hpp, local_read).
  return chosen;
}

// The key fabrix asks for where the provider does not choose (no
// FI_MR_PROV_KEY): SipHash of a counter under the domain's secret, so that
// keys cannot be guessed from outside the job (tcp;ofi_rxm accepts RMA from
// anyone who can connect to the endpoint and checks only key and range).
inline std::uint64_t requested_key(domain_state& d) {
  std::byte counter[8];
  fabrix::detail::store_le<std::uint64_t>(counter, d.next_key++);
  return fabrix::detail::siphash24(d.secret, std::span<const std::byte>(counter, sizeof(counter)));
}

// Registers [addr, addr+len) with `access`, honouring the provider's mode
// bits (requested keys unless FI_MR_PROV_KEY; bind + enable under FI_MR_ENDPOINT).
// `cuda_device` >= 0: the range is memory of that CUDA device (FI_HMEM_CUDA).
inline result<fid_mr*> register_range(domain_state& d, void* addr, std::size_t len, std::uint64_t access,
                                      int cuda_device = -1) {
  iovec iov{addr, len};
  fi_mr_attr attr{};
  attr.mr_iov = &iov;
  attr.iov_count = 1;
  attr.access = access;
  attr.iface = cuda_device >= 0 ? FI_HMEM_CUDA : FI_HMEM_SYSTEM;
  if (cuda_device >= 0) attr.device.cuda = cuda_device;
  fid_mr* mr = nullptr;
  for (int attempt = 0;; ++attempt) {
    attr.requested_key = (d.mr_mode & FI_MR_PROV_KEY) ? 0 : requested_key(d);
    const int ret = fi_mr_regattr(d.domain, &attr, 0, &mr);
    if (ret == 0) break;
    if (ret != -FI_ENOKEY || attempt == 3) return fail(ret, "fi_mr_regattr");  // ENOKEY: the key is taken
  }
  if (d.mr_mode & FI_MR_ENDPOINT) {
    int ret = fi_mr_bind(mr, &d.ep->fid, 0);
    if (ret == 0) ret = fi_mr_enable(mr);
    if (ret != 0) {
      fi_close(&mr->fid);
      return fail(ret, "fi_mr_bind/fi_mr_enable (FI_MR_ENDPOINT)");
    }
  }
  if (fi_mr_key(mr) == FI_KEY_NOTAVAIL) {
    fi_close(&mr->fid);
    return unexpected(status::unsupported, "the provider's keys do not fit 64 bits (FI_MR_RAW)", "ofi");
  }
  return mr;
}

// shm names its shared-memory region after the endpoint (default "<pid>:<n>:<n>"
// in /dev/shm). A process that ends without closing its domain (killed, or
// _Exit) leaves the region behind, and a later process with the same pid then
// fails fi_enable with EBUSY. fabrix names the region "fabrix_<pid>_<nonce>"
// instead, and removes regions of that form whose process is gone.
inline std::string shm_region_name(std::uint64_t nonce) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "fabrix_%d_%016llx", static_cast<int>(::getpid()),
                static_cast<unsigned long long>(nonce));
  return buf;
}

// Regions and key tables of processes gone (fabrix/detail/key_table.hpp).
using fabrix::detail::remove_stale_shm_regions;

// How long an RMA or atomic may stay in flight before it fails its peer with
// timed_out (see expire_operations in progress.hpp). FABRIX_OFI_OP_TIMEOUT_MS
// sets it for any provider (0: never); by default only shm has one, 10 s,
// because shm 1.17 drops a rejected operation without ever completing it.
// Other providers report their own errors, and a timeout there would only
// punish a target that is slow to progress.
inline constexpr long default_shm_op_timeout_ms = 10000;

inline result<std::chrono::milliseconds> op_timeout_for(const char* prov_name) {
  long ms = std::strcmp(prov_name, "shm") == 0 ? default_shm_op_timeout_ms : 0;
  std::string why;
  if (!fabrix::detail::env_number("FABRIX_OFI_OP_TIMEOUT_MS", ms, 0, 24L * 3600 * 1000, why))
    return unexpected(status::invalid_argument, why, "ofi");
  return std::chrono::milliseconds(ms);
}

// fabrix's own CMA to node-mates over shm (post.hpp, by_cma):
// FABRIX_OFI_CMA=0 turns it off; FABRIX_OFI_CMA_MIN_BYTES is the smallest
// write or read it copies (default 0, every size: unlike UCX's shared-memory
// queues, shm's commands were no faster at any size, 8 B to 16 KiB, even
// with the target polling; providers/ofi/README.md). Other providers never
// use it: their domains may not use shared memory.
inline result<void> cma_settings(domain_state& d, bool shm) {
  int on = 1;
  std::uint64_t min_bytes = 0;
  std::string why;
  if (!fabrix::detail::env_number("FABRIX_OFI_CMA", on, 0, 1, why) ||
      !fabrix::detail::env_number("FABRIX_OFI_CMA_MIN_BYTES", min_bytes, 0, 1ll << 40, why, true))
    return unexpected(status::invalid_argument, why, "ofi");
  d.cma = shm && on == 1;
  d.cma_min_bytes = min_bytes;
  return {};
}

// Opens fabric, domain, CQ, AV and endpoint for d.info, and fills the
// provider facts in `d`.
inline result<void> open_objects(domain_state& d) {
  fi_info* info = d.info;
  const std::size_t slots = d.ops.capacity();
  const bool shm = std::strcmp(info->fabric_attr->prov_name, "shm") == 0;
  if (int ret = fi_fabric(info->fabric_attr, &d.fabric, nullptr); ret != 0) return fail(ret, "fi_fabric");
  if (int ret = fi_domain(d.fabric, info, &d.domain, nullptr); ret != 0) return fail(ret, "fi_domain");

  fi_cq_attr cq{};
  cq.size = std::max<std::size_t>(2 * slots, 1024);
  cq.format = FI_CQ_FORMAT_DATA;
  cq.wait_obj = FI_WAIT_FD;
  if (d.wakeup && fi_cq_open(d.domain, &cq, &d.cq, nullptr) == 0) {
    if (fi_control(&d.cq->fid, FI_GETWAIT, &d.wait_fd) != 0) d.wait_fd = -1;
  } else {
    // None asked for (domain_options::wakeup), or no fd here: wait() sleeps in short slices.
    cq.wait_obj = FI_WAIT_NONE;
    if (int ret = fi_cq_open(d.domain, &cq, &d.cq, nullptr); ret != 0) return fail(ret, "fi_cq_open");
  }

  fi_av_attr av{};
  av.type = info->domain_attr->av_type != FI_AV_UNSPEC ? info->domain_attr->av_type : FI_AV_MAP;
  av.count = 64;
  if (int ret = fi_av_open(d.domain, &av, &d.av, nullptr); ret != 0) return fail(ret, "fi_av_open");
  if (int ret = fi_endpoint(d.domain, info, &d.ep, nullptr); ret != 0) return fail(ret, "fi_endpoint");
  if (int ret = fi_ep_bind(d.ep, &d.av->fid, 0); ret != 0) return fail(ret, "fi_ep_bind(av)");
  if (int ret = fi_ep_bind(d.ep, &d.cq->fid, FI_TRANSMIT | FI_RECV); ret != 0) return fail(ret, "fi_ep_bind(cq)");
  if (shm) {
    const std::string name = shm_region_name(d.nonce);
    if (int ret = fi_setname(&d.ep->fid, const_cast<char*>(name.c_str()), name.size() + 1); ret != 0)
      return fail(ret, "fi_setname(" + name + ")");
  }
  if (int ret = fi_enable(d.ep); ret != 0) {
    // ofi_rxm over verbs sizes its CQ from FI_UNIVERSE_SIZE (default 256):
    // a device with fewer CQ entries (rxe: 32767) refuses it here.
    const bool rxm_verbs = std::strstr(info->fabric_attr->prov_name, "verbs") != nullptr &&
                           std::strstr(info->fabric_attr->prov_name, "ofi_rxm") != nullptr;
    if (ret == -FI_EINVAL && rxm_verbs && std::getenv("FI_UNIVERSE_SIZE") == nullptr)
      return fail(ret,
                  "fi_enable (verbs;ofi_rxm sizes its completion queue from FI_UNIVERSE_SIZE, default 256; "
                  "a device with fewer CQ entries, such as rxe, refuses it: try FI_UNIVERSE_SIZE=64)");
    return fail(ret, "fi_enable");
  }

  d.mr_mode = static_cast<std::uint64_t>(info->domain_attr->mr_mode);
  d.manual_progress = info->domain_attr->data_progress != FI_PROGRESS_AUTO;
  d.local_reads = shm;
  d.iov_limit = std::min<std::size_t>({info->tx_attr->iov_limit, max_iov});
  if (d.iov_limit == 0) d.iov_limit = 1;
  d.inject_size = info->tx_attr->inject_size;
  d.cq_data_carries_length = info->domain_attr->cq_data_size >= 8;
  fi_atomic_attr aa{};
  d.atomics = fi_query_atomic(d.domain, FI_UINT64, FI_SUM, &aa, FI_FETCH_ATOMIC) == 0 &&
              fi_query_atomic(d.domain, FI_UINT64, FI_CSWAP, &aa, FI_COMPARE_ATOMIC) == 0;

  // FABRIX_OFI_NOTIFY_BY_MESSAGE=1 forces the message path where CQ data
  // would do (so that tests exercise it on any provider).
  const char* by_message = fabrix::detail::env_text("FABRIX_OFI_NOTIFY_BY_MESSAGE");
  // completion::peer of a remote_write_imm: shm names the sender of a
  // remote-write CQ entry (FI_SOURCE); rxm 1.17 writes those entries without
  // their source (rxm_handle_remote_write), and other providers are not
  // known to, so there the notification goes as a message that carries the
  // sender's nonce.
  const bool names_writer = d.source && shm;
  d.notify_by_message = !d.cq_data_carries_length || !names_writer || (by_message && std::strcmp(by_message, "1") == 0);
  d.split_imm = d.notify_by_message || shm;
  d.errno_kind = prov_errno_kind_of(info->fabric_attr->prov_name);
  auto timeout = op_timeout_for(info->fabric_attr->prov_name);
  if (!timeout) return unexpected(std::move(timeout).error());
  d.op_timeout = *timeout;
  if (auto cma = cma_settings(d, shm); !cma) return cma;

  auto mr = register_range(d, d.operands.get(), operand_words * slots * sizeof(std::uint64_t),
                           FI_READ | FI_WRITE | FI_SEND | FI_RECV);
  if (!mr) return unexpected(std::move(mr).error());
  d.operand_mr = *mr;
  d.operand_desc = fi_mr_desc(d.operand_mr);
  if (d.notify_by_message) {
    d.notify_rxs = std::make_unique<domain_state::notify_rx[]>(domain_state::notify_rx_count);
    auto nmr =
        register_range(d, d.notify_rxs.get(), domain_state::notify_rx_count * sizeof(domain_state::notify_rx), FI_RECV);
    if (!nmr) return unexpected(std::move(nmr).error());
    d.notify_mr = *nmr;
    for (std::size_t i = 0; i < domain_state::notify_rx_count; ++i)
      if (ssize_t ret = post_notify_rx(d, i); ret != 0) return fail(ret, "fi_trecv (notification receives)");
  }
  if (d.iov_limit >= 2) {
    auto dmr = register_range(d, d.discard.get(), domain_state::discard_size, FI_RECV);
    if (!dmr) return unexpected(std::move(dmr).error());
    d.discard_mr = *dmr;
  }
  return {};
}

// "FI_MR_LOCAL|FI_MR_VIRT_ADDR" — the handled bits the provider asked for.
inline std::string mr_mode_names(std::uint64_t mode) {
  static constexpr std::pair<std::uint64_t, const char*> names[] = {{FI_MR_LOCAL, "FI_MR_LOCAL"},
                                                                    {FI_MR_VIRT_ADDR, "FI_MR_VIRT_ADDR"},
                                                                    {FI_MR_ALLOCATED, "FI_MR_ALLOCATED"},
                                                                    {FI_MR_PROV_KEY, "FI_MR_PROV_KEY"},
                                                                    {FI_MR_ENDPOINT, "FI_MR_ENDPOINT"}};
  std::string out;
  for (const auto& [bit, name] : names) {
    if ((mode & bit) == 0) continue;
    if (!out.empty()) out += '|';
    out += name;
  }
  return out.empty() ? "none" : out;
}

}  // namespace fabrix::ofi::detail
