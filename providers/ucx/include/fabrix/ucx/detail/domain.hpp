// The UCX domain: one ucp_context + one ucp_worker (single-threaded), the
// completion ring and the operation pool. Progress is ucp_worker_progress
// inside poll()/wait(); wait() sleeps on the worker's event fd.
// The address blob connect() takes is described in address.hpp.
//
// Peer failure: a peer on another node, or any peer when UCX_TLS names no
// shared-memory transport, gets UCP_ERR_HANDLING_MODE_PEER. Other peers on
// this node get no UCX error handling — that mode would rule out UCX 1.13's
// shared-memory transports — and poll()/wait() check their process every
// 100 ms instead (liveness.hpp). Either way a dead peer's operations
// complete with peer_unreachable. Closing endpoints: endpoint.hpp.
#pragma once

#include <fabrix/capabilities.hpp>
#include <fabrix/detail/describe_region.hpp>
#include <fabrix/detail/domain_identity.hpp>
#include <fabrix/detail/env.hpp>
#include <fabrix/domain_options.hpp>
#include <fabrix/memory.hpp>
#include <fabrix/remote_buffer.hpp>
#include <fabrix/result.hpp>
#include <fabrix/ucx/detail/address.hpp>
#include <fabrix/ucx/detail/device.hpp>
#include <fabrix/ucx/detail/direct_registration.hpp>
#include <fabrix/ucx/detail/endpoint.hpp>
#include <fabrix/ucx/detail/fifo_workaround.hpp>
#include <fabrix/ucx/detail/progress.hpp>
#include <fabrix/ucx/detail/region.hpp>
#include <fabrix/ucx/detail/rma.hpp>
#include <fabrix/ucx/detail/state.hpp>
#include <fabrix/ucx/detail/status.hpp>
#include <fabrix/ucx/native.hpp>

#include <poll.h>
#include <ucp/api/ucp.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace fabrix::ucx::detail {

inline constexpr capabilities ucx_caps{
    .rma = true,
    .write_with_imm = true,
    .atomics = true,
    .send_recv = true,
    // Debian's UCX has no CUDA support; a UCX built with it reports direct at
    // run time (runtime_caps), and fabrix::cuda::staged<ucx::provider> stages
    // device memory when it does not.
    .gpu = gpu_path::none,
    .max_sge = 16,
    // UCX emulates RMA and atomics in software over tcp (and atomics over
    // shared memory): the target must poll or wait for them to complete.
    .needs_target_progress = true,
};

class domain_impl {
 public:
  // domain::native(): the UCP context and worker (native.hpp says what may be done with them).
  native_domain native() const noexcept { return {d_->context, d_->worker}; }
  static result<domain_impl> create(const domain_options& opts) {
    if (opts.max_outstanding == 0) return unexpected(status::invalid_argument, "max_outstanding must be > 0", "ucx");
    if (opts.max_posted_recvs == 0) return unexpected(status::invalid_argument, "max_posted_recvs must be > 0", "ucx");
    if (opts.max_outstanding > UINT32_MAX)
      return unexpected(status::invalid_argument, "max_outstanding must fit in 32 bits", "ucx");
    std::string why;
    int cma = 1;  // cma.hpp
    std::uint64_t cma_min_bytes = fabrix::detail::default_cma_min_bytes;
    if (!fabrix::detail::env_number("FABRIX_UCX_CMA", cma, 0, 1, why) ||
        !fabrix::detail::env_number("FABRIX_UCX_CMA_MIN_BYTES", cma_min_bytes, 0, 1ll << 40, why, true))
      return unexpected(status::invalid_argument, why, "ucx");
    auto d = std::make_unique<detail::domain_state>(opts.max_outstanding, opts.max_posted_recvs);
    d->cma_min_bytes = cma_min_bytes;

    detail::release_fifo_every_message();  // fifo_workaround.hpp
    ucp_config_t* config = nullptr;
    ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
    if (s != UCS_OK) return detail::fail(s, "ucp_config_read");
    if (!opts.transport.empty()) {
      s = ucp_config_modify(config, "TLS", opts.transport.c_str());
      if (s != UCS_OK) {
        ucp_config_release(config);
        return detail::fail(s, "transport '" + opts.transport + "' (UCX_TLS)");
      }
      d->transport = opts.transport;
    } else {
      const char* env = std::getenv("UCX_TLS");
      d->transport = env ? env : "all";
    }
    if (!opts.device.empty()) {
      auto devices = detail::resolve_net_devices(opts.device);
      if (!devices) {
        ucp_config_release(config);
        return unexpected(std::move(devices).error());
      }
      s = ucp_config_modify(config, "NET_DEVICES", devices->value.c_str());
      if (s != UCS_OK) {
        ucp_config_release(config);
        return detail::fail(s, "device '" + opts.device + "' (UCX_NET_DEVICES=" + devices->value + ")");
      }
      d->net_devices = devices->value + (devices->why.empty() ? "" : " (" + devices->why + ")");
      d->net_device_list = devices->value;
    } else if (const char* env = std::getenv("UCX_NET_DEVICES"); env != nullptr && std::string_view(env) != "all") {
      d->net_device_list = env;
    }
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
    params.features = UCP_FEATURE_RMA | UCP_FEATURE_AMO64 | UCP_FEATURE_TAG | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
    params.name = "fabrix";
    {
      const detail::direct_registration_scope direct(detail::hardware_rma_only(d->transport));
      s = ucp_init(&params, config, &d->context);
    }
    ucp_config_release(config);
    if (s != UCS_OK) return detail::fail(s, "ucp_init with UCX_TLS=" + d->transport);

    ucp_context_attr_t ca{};
    ca.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
    if (ucp_context_query(d->context, &ca) == UCS_OK)
      d->cuda_memory = (ca.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;

    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    if ((s = ucp_worker_create(d->context, &wp, &d->worker)) != UCS_OK) return detail::fail(s, "ucp_worker_create");
    if ((s = ucp_worker_get_efd(d->worker, &d->event_fd)) != UCS_OK) return detail::fail(s, "ucp_worker_get_efd");

    ucp_am_handler_param_t am{};
    am.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG |
                    UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    am.id = detail::am_notify;
    am.flags = UCP_AM_FLAG_WHOLE_MSG;
    am.cb = detail::on_notify;
    am.arg = d.get();
    if ((s = ucp_worker_set_am_recv_handler(d->worker, &am)) != UCS_OK)
      return detail::fail(s, "ucp_worker_set_am_recv_handler");
    am.id = detail::am_rma;
    am.cb = detail::on_rma;
    if ((s = ucp_worker_set_am_recv_handler(d->worker, &am)) != UCS_OK)
      return detail::fail(s, "ucp_worker_set_am_recv_handler");
    am.id = detail::am_rma_reply;
    am.cb = detail::on_rma_reply;
    if ((s = ucp_worker_set_am_recv_handler(d->worker, &am)) != UCS_OK)
      return detail::fail(s, "ucp_worker_set_am_recv_handler");
    if ((s = ucp_dt_create_generic(&detail::recv_dt_ops, nullptr, &d->recv_dt)) != UCS_OK)
      return detail::fail(s, "ucp_dt_create_generic");

    const auto id = fabrix::detail::draw_domain_identity();
    d->nonce = id.nonce;
    d->secret = id.secret;
    // Our key table (fabrix/detail/key_table.hpp), after removing those of
    // processes gone. Best effort: without it, allocated regions take no slot.
    fabrix::detail::remove_stale_shm_regions();
    d->keys.name = fabrix::detail::key_table_name(d->self.pid, d->nonce);
    d->keys.map = fabrix::detail::key_table_map::open(d->keys.name, true);
    d->keys.opened();
    // Node-mates' registered host memory by CMA where shared memory may be
    // used, and the board (in the key table) exists.
    d->cma = cma == 1 && detail::may_use_shared_memory(d->transport) && d->keys.map.mapped();
    return domain_impl(std::move(d));
  }

  result<region_impl> register_memory(void* addr, std::size_t len, memory_location where, access rights) {
    if (where.kind != memory_kind::host && !(where.kind == memory_kind::cuda_device && d_->cuda_memory))
      return unexpected(status::unsupported,
                        "this UCX build cannot register cuda_device memory (no UCS_MEMORY_TYPE_CUDA in "
                        "ucp_context_query; use fabrix::cuda::staged<ucx::provider> or \"ucx+staged\")",
                        "ucx");
    ucp_mem_map_params_t mp{};
    mp.field_mask =
        UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
    mp.address = addr;
    mp.length = len;
    // UCX then uses its cuda_copy / cuda_ipc / gdr_copy (or a GPUDirect NIC) for it.
    mp.memory_type = where.kind == memory_kind::cuda_device ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
    ucp_mem_h memh = nullptr;
    ucs_status_t s = ucp_mem_map(d_->context, &mp, &memh);
    if (s != UCS_OK) return detail::fail(s, "ucp_mem_map");
    return make_region(memh, addr, len, where, rights);
  }

  // UCX-specific: host memory allocated *and* registered by UCX
  // (ucp_mem_map with UCP_MEM_MAP_ALLOCATE), released with the region. UCX
  // may place it in a shared-memory segment that peers on this node map
  // directly, so puts and gets are plain copies instead of cma system calls
  // or emulation — what ucx_perftest measures. Use memory_region::data().
  result<region_impl> allocate_memory(std::size_t len, access rights) {
    if (len == 0) return unexpected(status::invalid_argument, "allocate_memory: empty length", "ucx");
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS |
                    UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
    mp.address = nullptr;
    mp.length = len;
    mp.flags = UCP_MEM_MAP_ALLOCATE;
    mp.memory_type = UCS_MEMORY_TYPE_HOST;
    ucp_mem_h memh = nullptr;
    ucs_status_t s = ucp_mem_map(d_->context, &mp, &memh);
    if (s != UCS_OK) return detail::fail(s, "ucp_mem_map(ALLOCATE)");
    ucp_mem_attr_t attr{};
    attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
    if ((s = ucp_mem_query(memh, &attr)) != UCS_OK || attr.address == nullptr || attr.length < len) {
      ucp_mem_unmap(d_->context, memh);
      return detail::fail(s != UCS_OK ? s : UCS_ERR_NO_MEMORY, "ucp_mem_query");
    }
    return make_region(memh, attr.address, len, memory_location{}, rights, detail::ucx_allocated);
  }

  // The rest of a registration: pack the rkey and seal the remote_buffer.
  // Takes ownership of `memh` (unmapped on failure).
  result<region_impl> make_region(ucp_mem_h memh, void* addr, std::size_t len, memory_location where, access rights,
                                  std::uint64_t epoch_flags = 0) {
    ucs_status_t s = UCS_OK;
    void* packed = nullptr;
    std::size_t packed_size = 0;
    if ((s = ucp_rkey_pack(d_->context, memh, &packed, &packed_size)) != UCS_OK) {
      ucp_mem_unmap(d_->context, memh);
      return detail::fail(s, "ucp_rkey_pack");
    }
    if (packed_size > remote_buffer::max_key_size) {
      ucp_rkey_buffer_release(packed);
      ucp_mem_unmap(d_->context, memh);
      return unexpected(status::unsupported,
                        "packed rkey of " + std::to_string(packed_size) + " bytes exceeds remote_buffer::max_key_size",
                        "ucx");
    }
    remote_buffer rb = fabrix::detail::describe_region(provider_id::ucx, reinterpret_cast<std::uintptr_t>(addr), len,
                                                       where, rights, d_->nonce, d_->next_epoch++ | epoch_flags);
    // An allocated region peers on this node may use directly, and host
    // memory they may reach by CMA, take a slot in our key table: they check
    // it before each operation (post.hpp, cma.hpp).
    if ((epoch_flags & detail::ucx_allocated) != 0 || (where.kind == memory_kind::host && d_->cma)) {
      const std::uint32_t slot = d_->keys.take(rb.epoch, {rb.address, rb.length, static_cast<std::uint64_t>(rights)});
      if (slot != fabrix::detail::key_table_no_slot) {
        rb.epoch |= static_cast<std::uint64_t>(slot) << detail::key_slot_shift;
        d_->keys.map.store(slot, rb.epoch);
      }
    }
    d_->regions[rb.epoch] = detail::region_entry{rb.address, rb.length, rights};  // what checked requests may touch
    rb.key_size = static_cast<std::uint16_t>(packed_size);
    std::memcpy(rb.key.data(), packed, packed_size);
    ucp_rkey_buffer_release(packed);
    rb.seal = rb.compute_seal(d_->secret);
    return region_impl(d_.get(), memh, rb);
  }

  // Another round only while the worker is busy (more than one event in the
  // last one) or deferred work waits: after a lone event, one more
  // ucp_worker_progress finds nothing but costs tcp a progress pass (an
  // epoll_wait) between that completion and the caller.
  std::size_t poll(std::span<completion> out) {
    for (int round = 0; round < 4 && d_->ring.size() < out.size(); ++round) {
      const unsigned progressed = ucp_worker_progress(d_->worker);
      detail::cancel_recvs(*d_);
      detail::run_deferred(*d_);
      detail::check_liveness(*d_);
      if (progressed < 2 && d_->deferred.empty()) break;
    }
    if (!d_->closing.empty()) d_->advance_closing();
    return d_->ring.drain(out);
  }

  status wait(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      detail::check_liveness(*d_);
      if (!d_->closing.empty()) d_->advance_closing();
      if (!d_->ring.empty()) return status::ok;
      if (ucp_worker_progress(d_->worker) != 0 || !d_->deferred.empty() || d_->cancel_abandoned_recvs) {
        detail::cancel_recvs(*d_);
        detail::run_deferred(*d_);
        continue;
      }
      const ucs_status_t armed = ucp_worker_arm(d_->worker);
      if (armed == UCS_ERR_BUSY) continue;
      if (armed != UCS_OK) return detail::to_status(armed);
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return status::timed_out;
      if (!d_->watched.empty()) {  // wake up for the liveness check
        left = std::min(left, fabrix::detail::liveness_period);
        d_->poll_clock.wake();
      }
      if (!d_->closing.empty()) left = std::min(left, std::chrono::milliseconds(20));  // their deadlines
      pollfd pfd{d_->event_fd, POLLIN, 0};
      ::poll(&pfd, 1, static_cast<int>(left.count()));
    }
  }

  result<std::vector<std::byte>> address() const {
    ucp_address_t* addr = nullptr;
    std::size_t len = 0;
    if (ucs_status_t s = ucp_worker_get_address(d_->worker, &addr, &len); s != UCS_OK)
      return detail::fail(s, "ucp_worker_get_address");
    detail::peer_address me{d_->nonce, d_->self, d_->secret, {reinterpret_cast<const std::byte*>(addr), len}};
    auto blob = detail::encode_address(me);
    ucp_worker_release_address(d_->worker, addr);
    return blob;
  }

  result<endpoint_impl> connect(std::span<const std::byte> blob, std::uint32_t peer_id) {
    auto peer = detail::parse_address(blob);
    if (!peer) return unexpected(std::move(peer).error());
    auto p = std::make_unique<detail::peer_state>();
    p->dom = d_.get();
    p->peer_id = peer_id;
    p->send_tag = d_->nonce;
    p->recv_tag = peer->nonce;
    p->identity = peer->process;
    p->peer_secret = peer->secret;
    p->proof = detail::sender_proof(peer->secret, d_->nonce);
    ucp_ep_params_t ep{};
    ep.field_mask =
        UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = reinterpret_cast<const ucp_address_t*>(peer->native.data());
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = detail::on_peer_error;
    ep.err_handler.arg = p.get();
    // A peer on this node (process_identity.hpp: same kernel boot, pid
    // namespace and host, so its pid is comparable here) is watched by
    // fabrix itself where shared memory may be used, which leaves UCX free to
    // choose it; UCX's peer-failure mode would rule those transports out.
    p->same_node = peer->process.node == d_->self.node;
    if (p->same_node && detail::may_use_shared_memory(d_->transport)) {
      ep.field_mask &= ~static_cast<std::uint64_t>(UCP_EP_PARAM_FIELD_ERR_HANDLER);
      ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
      p->detects_failure = false;
    }
    // One-sided operations are checked by the target (rma.hpp) unless every
    // transport UCX may use does RMA in hardware, whose keys the NIC checks.
    p->checked_rma = !detail::hardware_rma_only(d_->transport);
    // A peer on this node: its key table says which of its allocated regions
    // are alive (post.hpp). Not there (another user, no table): unchecked.
    if (p->same_node)
      p->peer_keys =
          fabrix::detail::key_table_map::open(fabrix::detail::key_table_name(p->identity.pid, p->recv_tag), false);
    // CMA to its registered host memory: only between processes of one user
    // (its table is ours), whose boards can see each other (cma.hpp).
    p->cma = d_->cma && p->peer_keys.mapped() && p->peer_keys.owner_uid() == ::geteuid();
    const ucs_status_t s = ucp_ep_create(d_->worker, &ep, &p->ep);
    if (s != UCS_OK) return detail::fail(s, "ucp_ep_create");
    if (!p->detects_failure) d_->watched.push_back(p.get());
    d_->add_peer(p.get());
    return endpoint_impl(std::move(p));
  }

  provider_id provider() const noexcept { return provider_id::ucx; }
  std::uint64_t owner() const noexcept { return d_->nonce; }
  capabilities runtime_caps() const noexcept {
    capabilities c = ucx_caps;
    if (d_->cuda_memory) c.gpu = gpu_path::direct;
    return c;
  }
  // The one PCI function of the devices UCX_NET_DEVICES named at creation
  // (ours, else the environment's); nullopt with UCX's default (every
  // device). Read from sysfs on each call, so that creating a domain does
  // not pay for it.
  std::optional<std::string> device_pci() const {
    if (d_->net_device_list.empty()) return std::nullopt;  // UCX's default: every device
    return fabrix::detail::devices_pci_function(fabrix::detail::sysfs_root(), d_->net_device_list);
  }
  std::string describe() const {
    return "ucx " + version() + ", UCX_TLS=" + d_->transport +
           (d_->net_devices.empty() ? "" : ", UCX_NET_DEVICES=" + d_->net_devices) +
           (d_->cma
                ? ", node-mates' registered host memory: writes and reads from " + std::to_string(d_->cma_min_bytes) +
                      " B by CMA (" + std::to_string(cma_peers()) + " peers), the rest by checked requests"
                : ", node-mates' registered host memory by checked requests");
  }
  // Peers whose registered host memory this domain reaches by CMA now.
  std::size_t cma_peers() const noexcept {
    std::size_t n = 0;
    for (const detail::peer_state* p : d_->connected) n += p->cma ? 1 : 0;
    return n;
  }
  static std::string version() {
    unsigned major = 0, minor = 0, release = 0;
    ucp_get_version(&major, &minor, &release);
    return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release);
  }

  // Malformed notifications received from peers and dropped.
  std::uint64_t dropped_notifications() const noexcept { return d_->dropped_notifications; }
  // Checked requests and replies dropped (malformed, from a domain with no
  // queue pair to this one, or answering nothing in flight).
  std::uint64_t dropped_requests() const noexcept { return d_->dropped_requests; }
  int event_fd() const noexcept { return d_->event_fd; }
  ucp_worker_h worker() const noexcept { return d_->worker; }

 private:
  explicit domain_impl(std::unique_ptr<detail::domain_state> d) : d_(std::move(d)) {}
  std::unique_ptr<detail::domain_state> d_;
};

}  // namespace fabrix::ucx::detail
