// The libfabric domain: fabric + domain + one FI_EP_RDM endpoint + its CQ and
// address vector (setup.hpp), the completion ring and the operation pool.
// Progress is fi_cq_read inside poll()/wait(); wait() sleeps on the CQ's
// wait fd (fi_trywait, then poll(2)), or in 1 ms slices where the provider
// has none or domain_options::wakeup is false (the CQ then has no wait
// object, which tcp;ofi_rxm pays for per completion). The address blob
// connect() takes is described in address.hpp.
//
// Memory registration honours every mode bit the provider reports:
//   FI_MR_LOCAL      every local buffer is registered and its fi_mr_desc is
//                    passed with every operation (atomic operands too: they
//                    live in one region registered with the domain)
//   FI_MR_VIRT_ADDR  peers target virtual addresses; without it, offsets
//                    from the region's start (the key bytes say which)
//   FI_MR_PROV_KEY   the provider picks keys; without it fabrix requests
//                    keys unique within the domain
//   FI_MR_ALLOCATED  only allocated memory is registered (always the case
//                    for fabrix regions: callers register their buffers)
//   FI_MR_ENDPOINT   each registration is bound to the endpoint and enabled
//
// Peer failure: libfabric's error completions (connection reset and the
// like) fail the peer; peers on this node are also watched by process
// (shared memory never reports a dead peer) every 100 ms of poll()/wait().
// Either way a dead peer's operations complete with peer_unreachable. An RMA
// or atomic that libfabric never completes (shm drops what its target
// refuses) fails its peer with timed_out after FABRIX_OFI_OP_TIMEOUT_MS
// (expire_operations in progress.hpp).
#pragma once

#include <fabrix/capabilities.hpp>
#include <fabrix/detail/describe_region.hpp>
#include <fabrix/detail/domain_identity.hpp>
#include <fabrix/detail/topology.hpp>
#include <fabrix/domain_options.hpp>
#include <fabrix/memory.hpp>
#include <fabrix/ofi/detail/address.hpp>
#include <fabrix/ofi/detail/endpoint.hpp>
#include <fabrix/ofi/detail/progress.hpp>
#include <fabrix/ofi/detail/region.hpp>
#include <fabrix/ofi/detail/setup.hpp>
#include <fabrix/ofi/detail/state.hpp>
#include <fabrix/ofi/detail/status.hpp>
#include <fabrix/ofi/native.hpp>
#include <fabrix/remote_buffer.hpp>
#include <fabrix/result.hpp>

#include <poll.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace fabrix::ofi::detail {

inline constexpr capabilities ofi_caps{
    .rma = true,
    .write_with_imm = true,
    .atomics = true,
    .send_recv = true,
    .gpu = gpu_path::none,  // at compile time; runtime_caps() says direct where the provider has FI_HMEM
    .max_sge = static_cast<std::uint32_t>(detail::max_iov),
    // tcp;ofi_rxm and shm progress data manually: the target must poll or wait.
    .needs_target_progress = true,
};

class domain_impl {
 public:
  // domain::native(): the fabric, domain, endpoint, CQ and AV (native.hpp says what may be done with them).
  native_domain native() const noexcept { return {d_->fabric, d_->domain, d_->ep, d_->cq, d_->av}; }
  static result<domain_impl> create(const domain_options& opts) {
    if (opts.max_outstanding == 0) return unexpected(status::invalid_argument, "max_outstanding must be > 0", "ofi");
    if (opts.max_posted_recvs == 0) return unexpected(status::invalid_argument, "max_posted_recvs must be > 0", "ofi");
    bool hmem = false, source = false;
    auto info = detail::find_provider(opts, hmem, source);
    if (!info) return unexpected(std::move(info).error());
    auto d = std::make_unique<detail::domain_state>(opts.max_outstanding, opts.max_posted_recvs);
    d->info = *info;
    d->hmem = hmem;
    d->source = source;
    d->wakeup = opts.wakeup;
    const auto id = fabrix::detail::draw_domain_identity(detail::notify_tag_bit);
    d->nonce = id.nonce;
    d->secret = id.secret;
    // Our key table (detail/key_table.hpp), after removing those of processes gone.
    detail::remove_stale_shm_regions();
    d->keys.name = detail::key_table_name(d->self.pid, d->nonce);
    d->keys.map = detail::key_table_map::open(d->keys.name, true);
    d->keys.opened();
    if (auto r = detail::open_objects(*d); !r) return unexpected(r.error());
    return domain_impl(std::move(d));
  }

  result<region_impl> register_memory(void* addr, std::size_t len, memory_location where, access rights) {
    if (where.kind != memory_kind::host && where.kind != memory_kind::cuda_device)
      return unexpected(status::unsupported, "the libfabric provider registers host and cuda_device memory only",
                        "ofi");
    if (where.kind == memory_kind::cuda_device && !d_->hmem)
      return unexpected(status::unsupported,
                        std::string("libfabric provider ") + d_->info->fabric_attr->prov_name +
                            " was opened without FI_HMEM (no CUDA driver here, FABRIX_OFI_HMEM=0, or the provider "
                            "or this libfabric build lacks it), so it cannot register cuda_device memory",
                        "ofi");
    std::uint64_t acc = FI_READ | FI_WRITE | FI_SEND | FI_RECV;
    if (allows(rights, access::remote_read)) acc |= FI_REMOTE_READ;
    if (allows(rights, access::remote_write)) acc |= FI_REMOTE_WRITE;
    // libfabric has no separate atomic right: atomics need remote read and write.
    if (allows(rights, access::remote_atomic)) acc |= FI_REMOTE_READ | FI_REMOTE_WRITE;
    auto mr = detail::register_range(*d_, addr, len, acc, where.kind == memory_kind::cuda_device ? where.device : -1);
    if (!mr) {
      if (where.kind != memory_kind::cuda_device) return unexpected(std::move(mr).error());
      fabrix::error e = std::move(mr).error();  // -FI_ENOSYS (unsupported): libfabric built without CUDA
      e.message = "FI_HMEM_CUDA registration of device " + std::to_string(where.device) + ": " + e.message;
      return unexpected(std::move(e));
    }

    remote_buffer rb = fabrix::detail::describe_region(provider_id::ofi, reinterpret_cast<std::uintptr_t>(addr), len,
                                                       where, rights, d_->nonce, d_->next_epoch++);
    rb.key_size = static_cast<std::uint16_t>(detail::key_blob_size);
    const detail::remote_key key{fi_mr_key(*mr), (d_->mr_mode & FI_MR_VIRT_ADDR) != 0,
                                 d_->keys.take(rb.epoch, {rb.address, rb.length, static_cast<std::uint64_t>(rights)})};
    detail::encode_key(key, std::span<std::byte, detail::key_blob_size>(rb.key.data(), detail::key_blob_size));
    rb.seal = rb.compute_seal(d_->secret);
    return region_impl(*mr, rb, d_.get(), key.slot);
  }

  // Another round only after a full batch: a short one means the CQ was
  // empty when libfabric looked, and one more fi_cq_read would cost tcp a
  // progress pass (an epoll_wait) between a completion and the caller.
  std::size_t poll(std::span<completion> out) {
    for (int round = 0; round < 4 && d_->ring.size() < out.size(); ++round) {
      if (detail::progress(*d_) < detail::cq_batch) break;
    }
    return d_->ring.drain(out);
  }

  status wait(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (!d_->ring.empty()) return status::ok;
      if (detail::progress(*d_) != 0) continue;
      if (!d_->ring.empty()) return status::ok;
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return status::timed_out;
      if (detail::needs_periodic_wakeup(*d_)) {  // wake up for the liveness check / timeout sweep
        left = std::min(left, fabrix::detail::liveness_period);
        d_->poll_clock.wake();
      }
      if (d_->wait_fd < 0) {
        ::poll(nullptr, 0, static_cast<int>(std::min<long>(left.count(), 1)));
        continue;
      }
      fid* f = &d_->cq->fid;
      const int armed = fi_trywait(d_->fabric, &f, 1);
      if (armed == -FI_EAGAIN) continue;  // something to read first
      if (armed != FI_SUCCESS) {          // no usable fd after all: sleep in slices
        ::poll(nullptr, 0, static_cast<int>(std::min<long>(left.count(), 1)));
        continue;
      }
      pollfd pfd{d_->wait_fd, POLLIN, 0};
      ::poll(&pfd, 1, static_cast<int>(left.count()));
    }
  }

  result<std::vector<std::byte>> address() const {
    std::vector<std::byte> name(detail::max_name_size);
    std::size_t len = name.size();
    if (int ret = fi_getname(&d_->ep->fid, name.data(), &len); ret != 0) return detail::fail(ret, "fi_getname");
    name.resize(len);
    const detail::peer_address me{d_->nonce, d_->self, d_->secret, name};
    return detail::encode_address(me);
  }

  result<endpoint_impl> connect(std::span<const std::byte> blob, std::uint32_t peer_id) {
    auto peer = detail::parse_address(blob);
    if (!peer) return unexpected(std::move(peer).error());
    auto p = std::make_unique<detail::peer_state>();
    p->dom = d_.get();
    p->peer_id = peer_id;
    p->nonce = peer->nonce;
    p->peer_secret = peer->secret;
    p->identity = peer->process;
    p->watched = peer->process.node == d_->self.node;
    p->name.assign(peer->native.begin(), peer->native.end());
    // One address-vector entry per peer address, shared by the queue pairs
    // to it and removed with the last of them (endpoint.hpp): shm 1.17
    // forgets an address at its first fi_av_remove, whatever the count.
    const detail::peer_state* same = nullptr;
    for (const detail::peer_state* q : d_->peers)
      if (q->name == p->name) same = q;
    if (same) {
      p->addr = same->addr;
    } else {
      const int n = fi_av_insert(d_->av, peer->native.data(), 1, &p->addr, 0, nullptr);
      if (n != 1) return detail::fail(n < 0 ? n : -FI_EINVAL, "fi_av_insert of the peer's address");
    }
    if (p->watched)
      p->peer_keys = detail::key_table_map::open(detail::key_table_name(p->identity.pid, p->nonce), false);
    p->cma = d_->cma && p->peer_keys.mapped();
    d_->peers.push_back(p.get());
    d_->busy.reserve(d_->peers.capacity());
    return endpoint_impl(std::move(p));
  }

  provider_id provider() const noexcept { return provider_id::ofi; }
  std::uint64_t owner() const noexcept { return d_->nonce; }
  capabilities runtime_caps() const noexcept {
    capabilities c = ofi_caps;
    c.atomics = d_->atomics;
    c.max_sge = static_cast<std::uint32_t>(d_->iov_limit);
    c.needs_target_progress = d_->manual_progress;
    c.gpu = d_->hmem ? gpu_path::direct : gpu_path::none;
    return c;
  }
  // The PCI function of the libfabric domain's device: by its name in
  // sysfs (an interface such as "eth0", an RDMA device such as "mlx5_0"),
  // else as libfabric's fi_nic reports it; nullopt for "shm", "lo" and
  // devices on no PCI function.
  std::optional<std::string> device_pci() const {
    if (auto f = fabrix::detail::device_pci_function(fabrix::detail::sysfs_root(), domain_name())) return f;
    const fi_info* i = d_->info;
    if (i->nic == nullptr || i->nic->bus_attr == nullptr || i->nic->bus_attr->bus_type != FI_BUS_PCI)
      return std::nullopt;
    const auto& pci = i->nic->bus_attr->attr.pci;
    char text[16];
    std::snprintf(text, sizeof text, "%04x:%02x:%02x.%x", pci.domain_id, pci.bus_id, pci.device_id, pci.function_id);
    return std::string(text);
  }
  std::string describe() const {
    const fi_info* i = d_->info;
    return "ofi " + version() + ", provider " + i->fabric_attr->prov_name + ", fabric " + i->fabric_attr->name +
           ", domain " + i->domain_attr->name + ", mr_mode " + detail::mr_mode_names(d_->mr_mode) + ", progress " +
           (d_->manual_progress ? "manual" : "auto") + (d_->wait_fd >= 0 ? ", wait fd" : ", no wait fd") +
           (d_->hmem ? ", FI_HMEM" : "") +
           (d_->cma ? ", node-mates' host memory by CMA from " + std::to_string(d_->cma_min_bytes) + " B" : "");
  }
  static std::string version() {
    const std::uint32_t v = fi_version();
    return std::to_string(FI_MAJOR(v)) + "." + std::to_string(FI_MINOR(v));
  }

  // The provider's own names and bits, for tests and tools.
  std::string provider_name() const { return d_->info->fabric_attr->prov_name; }
  // The libfabric domain in use ("eth0", "lo", "shm", ...): what
  // domain_options::device selects.
  std::string domain_name() const { return d_->info->domain_attr->name ? d_->info->domain_attr->name : ""; }
  std::uint64_t mr_mode() const noexcept { return d_->mr_mode; }
  int wait_fd() const noexcept { return d_->wait_fd; }
  // Text of the latest error completion (fi_strerror + fi_cq_strerror).
  const std::string& last_error() const noexcept { return d_->last_error; }
  // Error entries that named no operation of ours (e.g. a target-side error).
  std::uint64_t stray_errors() const noexcept { return d_->stray_errors; }
  // The operation timeout in force (FABRIX_OFI_OP_TIMEOUT_MS; 0: none) and
  // how many operations it has expired.
  std::chrono::milliseconds op_timeout() const noexcept { return d_->op_timeout; }
  std::uint64_t expired_operations() const noexcept { return d_->expired_operations; }
  // Writes and reads fabrix copied itself by CMA (post.hpp, by_cma).
  std::uint64_t cma_operations() const noexcept { return d_->cma_operations; }

 private:
  explicit domain_impl(std::unique_ptr<detail::domain_state> d) : d_(std::move(d)) {}
  std::unique_ptr<detail::domain_state> d_;
};

}  // namespace fabrix::ofi::detail
