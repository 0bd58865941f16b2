// The verbs domain: one device context and port, a protection domain, one
// completion queue (with a completion channel for wait()), a shared receive
// queue with bounce buffers for write_with_imm notifications and sends, and
// a UD queue pair for the connection handshake. All of it is allocated and
// registered here, once.
#pragma once

#include <fabrix/capabilities.hpp>
#include <fabrix/detail/describe_region.hpp>
#include <fabrix/detail/domain_identity.hpp>
#include <fabrix/detail/topology.hpp>
#include <fabrix/domain_options.hpp>
#include <fabrix/memory.hpp>
#include <fabrix/remote_buffer.hpp>
#include <fabrix/result.hpp>
#include <fabrix/verbs/detail/address.hpp>
#include <fabrix/verbs/detail/cm.hpp>
#include <fabrix/verbs/detail/device.hpp>
#include <fabrix/verbs/detail/device_memory.hpp>
#include <fabrix/verbs/detail/endpoint.hpp>
#include <fabrix/verbs/detail/handshake.hpp>
#include <fabrix/verbs/detail/options.hpp>
#include <fabrix/verbs/detail/progress.hpp>
#include <fabrix/verbs/detail/qp.hpp>
#include <fabrix/verbs/detail/region.hpp>
#include <fabrix/verbs/detail/state.hpp>
#include <fabrix/verbs/detail/status.hpp>
#include <fabrix/verbs/native.hpp>

#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace fabrix::verbs::detail {

inline constexpr capabilities verbs_caps{
    .rma = true,
    .write_with_imm = true,
    .atomics = true,
    .send_recv = true,
    .gpu = gpu_path::none,           // at run time: direct when dma-buf or peer memory works (runtime_caps())
    .max_sge = 32,                   // at run time: what the device allows (runtime_caps())
    .needs_target_progress = false,  // the target's NIC does RMA and atomics
};

class domain_impl {
 public:
  // domain::native(): the device context, PD, CQ and SRQ (native.hpp says what may be done with them).
  native_domain native() const noexcept { return {d_->ctx, d_->pd, d_->cq, d_->srq, d_->dev.port}; }
  static result<domain_impl> create(const domain_options& opts) { return create(opts, options{}); }

  // `base` holds code-level tunables; FABRIX_VERBS_* variables override them,
  // and opts.device / opts.transport override the device / connection path.
  static result<domain_impl> create(const domain_options& opts, const options& base) {
    if (opts.max_outstanding == 0) return unexpected(status::invalid_argument, "max_outstanding must be > 0", "verbs");
    if (opts.max_posted_recvs == 0 || opts.max_posted_recvs > (std::size_t{1} << 24))
      return unexpected(status::invalid_argument, "max_posted_recvs must be in 1..2^24", "verbs");
    auto o = options_from_env(base);
    if (!o) return unexpected(std::move(o).error());
    if (!opts.device.empty()) o->device = opts.device;
    // domain_options::transport picks the connection path ("" keeps the
    // options / FABRIX_VERBS_CONNECT; "rc" is the conformance label).
    if (opts.transport == "rdma_cm")
      o->connect = connect_method::rdma_cm;
    else if (opts.transport == "bootstrap")
      o->connect = connect_method::bootstrap;
    else if (!opts.transport.empty() && opts.transport != "rc")
      return unexpected(status::invalid_argument,
                        "verbs: transport '" + opts.transport + "' is not rdma_cm, bootstrap or rc", "verbs");
    auto dev = detail::open_device(*o);
    if (!dev) return unexpected(std::move(dev).error());
    auto d = std::make_unique<detail::domain_state>(*o, opts.max_outstanding, opts.max_posted_recvs);
    d->ctx = dev->ctx;
    d->dev = dev->choice;
    if (d->opts.connect == connect_method::rdma_cm)
      if (auto r = detail::cm_open(*d); !r) return unexpected(r.error());
    if (auto r = setup(*d); !r) return unexpected(r.error());
    probe_gpu(*d);
    return domain_impl(std::move(d));
  }

  // Host memory: ibv_reg_mr. cuda_device memory: dma-buf, then peer memory
  // (device_memory.hpp), through the installed GPU backend; without one
  // (no <fabrix/verbs/cuda.hpp> in the program), unsupported.
  result<region_impl> register_memory(void* addr, std::size_t len, memory_location where, access rights) {
    if (where.kind == memory_kind::cuda_device) {
      const device_memory_hooks* hooks = detail::installed_device_memory();
      if (hooks == nullptr)
        return unexpected(status::unsupported,
                          "verbs: cuda_device memory needs a GPU memory backend: include <fabrix/verbs/cuda.hpp> "
                          "in a program built with fabrix-cuda (this one has none)",
                          "verbs");
      detail::verbs_device_ops ops{d_->pd, hooks};
      auto r = detail::register_device_memory(ops, addr, len, access_flags(rights));
      if (!r) return unexpected(std::move(r).error());
      return make_region(r->mr, reinterpret_cast<std::uintptr_t>(addr), len, where, rights);
    }
    if (where.kind != memory_kind::host)
      return unexpected(status::unsupported, "verbs: only host and cuda_device memory can be registered", "verbs");
    ibv_mr* mr = ibv_reg_mr(d_->pd, addr, len, access_flags(rights));
    if (mr == nullptr) {
      const int e = errno;
      return detail::fail(
          e, std::string("ibv_reg_mr") + (e == ENOMEM || e == EPERM ? " (locked-memory limit, ulimit -l?)" : ""));
    }
    return make_region(mr, reinterpret_cast<std::uintptr_t>(addr), len, where, rights);
  }

  // Registers `len` bytes at `offset` of a dma-buf the caller exported
  // itself, visible to peers at virtual address `iova`. register_memory()
  // does this for cuda_device memory through the installed backend.
  result<region_impl> register_dmabuf(int fd, std::uint64_t offset, std::size_t len, std::uint64_t iova,
                                      memory_location where, access rights) {
    ibv_mr* mr = ibv_reg_dmabuf_mr(d_->pd, offset, len, iova, fd, access_flags(rights));
    if (mr == nullptr) return detail::fail(errno, "ibv_reg_dmabuf_mr");
    return make_region(mr, iova, len, where, rights);
  }

  // With rdma_cm, every 64th call also reads the connection events (peer
  // disconnects); wait() reads them whenever they come.
  std::size_t poll(std::span<completion> out) {
    if (d_->cm_channel && ++d_->cm_tick >= 64) {
      d_->cm_tick = 0;
      detail::drive_cm(*d_);
    }
    if (d_->posted_recvs && ++d_->probe_tick >= 64) {  // recv()s wait: probe their idle queue pairs' peers
      d_->probe_tick = 0;
      detail::probe_idle_peers(*d_);
    }
    if (d_->ring.size() < out.size()) detail::drive(*d_, out.size());
    return d_->ring.drain(out);
  }

  status wait(std::chrono::milliseconds timeout) {
    detail::domain_state& d = *d_;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (!d.ring.empty()) return status::ok;
      if (detail::drive(d) > 0) continue;
      if (ibv_req_notify_cq(d.cq, 0) != 0) return status::provider_error;
      if (detail::drive(d) > 0) continue;  // arrived before the CQ was armed
      d.poll_clock.wake();                 // about to sleep: a probe that is due goes now
      detail::probe_idle_peers(d);
      const auto now = std::chrono::steady_clock::now();
      auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - now);
      if (left.count() <= 0) return status::timed_out;
      // recv()s waiting: wake up for the next round of liveness probes.
      if (d.posted_recvs && d.opts.probe_ms)
        left = std::min(left, std::max(std::chrono::milliseconds(1),
                                       std::chrono::ceil<std::chrono::milliseconds>(d.probe.next - now)));
      pollfd pfd[2] = {{d.channel->fd, POLLIN, 0}, {d.cm_channel ? d.cm_channel->fd : -1, POLLIN, 0}};
      if (::poll(pfd, d.cm_channel ? 2 : 1, static_cast<int>(left.count())) > 0) {
        if (pfd[1].revents) detail::drive_cm(d);  // a disconnect flushes requests: their completions follow
        if (!pfd[0].revents) continue;
        ibv_cq* cq = nullptr;
        void* ctx = nullptr;
        if (ibv_get_cq_event(d.channel, &cq, &ctx) == 0 && ++d.unacked_events >= 64) {
          ibv_ack_cq_events(d.cq, d.unacked_events);
          d.unacked_events = 0;
        }
      }
    }
  }

  result<std::vector<std::byte>> address() const {
    detail::peer_address a;
    a.link_layer = d_->dev.link_layer;
    a.mtu = static_cast<std::uint8_t>(d_->dev.mtu);
    a.nonce = d_->nonce;
    a.secret = d_->secret;
    a.gid = d_->dev.gid.raw;
    a.lid = d_->dev.lid;
    a.ud_qpn = d_->ud_qp->qp_num;
    a.qkey = detail::ud_qkey;
    a.flush_addr = reinterpret_cast<std::uintptr_t>(d_->flush_word());
    a.flush_rkey = d_->flush_mr->rkey;
    if (d_->cm_listener) detail::cm_fill_address(*d_, a);
    return detail::encode_address(a);
  }

  result<endpoint_impl> connect(std::span<const std::byte> blob, std::uint32_t peer_id) {
    auto p = detail::connect_peer(*d_, blob, peer_id);
    if (!p) return unexpected(std::move(p).error());
    return endpoint_impl(std::move(*p));
  }

  provider_id provider() const noexcept { return provider_id::verbs; }
  std::uint64_t owner() const noexcept { return d_->nonce; }
  capabilities runtime_caps() const noexcept {
    capabilities c = verbs_caps;
    c.max_sge = d_->max_sge;
    c.atomics = d_->attr.atomic_cap != IBV_ATOMIC_NONE;
    c.gpu = d_->gpu == gpu_registration::none ? gpu_path::none : gpu_path::direct;
    return c;
  }
  // The PCI function of the RDMA device in use (sysfs class/infiniband);
  // nullopt for soft-RoCE and other devices on no PCI function.
  std::optional<std::string> device_pci() const {
    return fabrix::detail::device_pci_function(fabrix::detail::sysfs_root(), d_->dev.name);
  }
  // Device, port, GID and why they were chosen.
  std::string describe() const {
    const auto& v = d_->dev;
    return "verbs " + v.name + " port " + std::to_string(v.port) + " (" + v.why_device + "), " +
           std::string(detail::to_string(v.gid.kind)) + " GID[" + std::to_string(v.gid.index) + "] " +
           detail::gid_text(v.gid.raw) + " (" + v.why_gid + "), MTU " + detail::mtu_text(v.mtu) + ", max_sge " +
           std::to_string(d_->max_sge) + ", inline " + std::to_string(d_->max_inline) + " B, posts with " +
           (d_->wr_api ? "ibv_wr_*" : "ibv_post_send") + ", " +
           (d_->cm_listener ? "connects through rdma_cm (listening on " +
                                  detail::sockaddr_text(reinterpret_cast<const sockaddr*>(&d_->cm_addr)) + ")"
                            : std::string("connects through the bootstrap (UD handshake)")) +
           ", GPU memory: " + to_string(d_->gpu) + (d_->gpu == gpu_registration::none ? " (" + d_->gpu_why + ")" : "");
  }
  connect_method connection_method() const noexcept { return d_->opts.connect; }
  // How cuda_device memory is registered here (the probe at creation), and
  // why not when none.
  gpu_registration gpu_memory() const noexcept { return d_->gpu; }
  const std::string& gpu_memory_why() const noexcept { return d_->gpu_why; }

  const options& settings() const noexcept { return d_->opts; }
  // Datagrams and messages from peers that were malformed or unroutable.
  std::uint64_t dropped() const noexcept { return d_->dropped_datagrams; }
  detail::domain_state& state() noexcept { return *d_; }

 private:
  explicit domain_impl(std::unique_ptr<detail::domain_state> d) : d_(std::move(d)) {}

  static int access_flags(access rights) noexcept {
    int f = IBV_ACCESS_LOCAL_WRITE;
    if (allows(rights, access::remote_read)) f |= IBV_ACCESS_REMOTE_READ;
    if (allows(rights, access::remote_write)) f |= IBV_ACCESS_REMOTE_WRITE;
    if (allows(rights, access::remote_atomic)) f |= IBV_ACCESS_REMOTE_ATOMIC;
    return f;
  }

  result<region_impl> make_region(ibv_mr* mr, std::uint64_t addr, std::size_t len, memory_location where,
                                  access rights) {
    remote_buffer rb =
        fabrix::detail::describe_region(provider_id::verbs, addr, len, where, rights, d_->nonce, d_->next_epoch++);
    rb.key_size = 4;
    fabrix::detail::store_le<std::uint32_t>(rb.key.data(), mr->rkey);
    rb.seal = rb.compute_seal(d_->secret);
    return region_impl(mr, rb);
  }

  // Which way cuda_device memory registers on this device, tried once on a
  // small device buffer by the backend (none without a backend).
  static void probe_gpu(detail::domain_state& d) {
    const device_memory_hooks* hooks = detail::installed_device_memory();
    if (hooks == nullptr || hooks->probe == nullptr) {
      d.gpu_why = "no GPU memory backend in this program (<fabrix/verbs/cuda.hpp>)";
      return;
    }
    d.gpu = hooks->probe(d.pd, &d.gpu_why);
  }

  static result<void> setup(detail::domain_state& d) {
    using detail::fail;
    if (ibv_query_device(d.ctx, &d.attr) != 0) return fail(errno, "ibv_query_device");
    const auto& a = d.attr;
    d.max_sge =
        static_cast<std::uint32_t>(std::clamp(std::min(a.max_sge, a.max_sge_rd > 0 ? a.max_sge_rd : a.max_sge), 1, 32));
    d.max_rd_atomic = static_cast<std::uint32_t>(std::clamp(a.max_qp_init_rd_atom, 1, 16));
    d.max_dest_rd_atomic = static_cast<std::uint32_t>(std::clamp(a.max_qp_rd_atom, 1, 16));
    d.opts.sq_depth = std::min<std::uint32_t>(d.opts.sq_depth, static_cast<std::uint32_t>(a.max_qp_wr));
    d.opts.srq_depth = std::min<std::uint32_t>(d.opts.srq_depth, static_cast<std::uint32_t>(a.max_srq_wr));
    if ((d.pd = ibv_alloc_pd(d.ctx)) == nullptr) return fail(errno, "ibv_alloc_pd");
    if ((d.channel = ibv_create_comp_channel(d.ctx)) == nullptr) return fail(errno, "ibv_create_comp_channel");
    const int fl = fcntl(d.channel->fd, F_GETFL);
    if (fl < 0 || fcntl(d.channel->fd, F_SETFL, fl | O_NONBLOCK) < 0) return fail(errno, "fcntl(O_NONBLOCK)");

    // The CQ holds every request that can complete at once: the domain's
    // send credits, the SRQ's receives, the handshake's datagrams and the
    // liveness probes (post.hpp).
    const std::uint64_t fixed = d.opts.srq_depth + 2 * detail::ud_slots + detail::max_probes + 16;
    const std::uint64_t max_cqe = static_cast<std::uint64_t>(a.max_cqe);
    if (max_cqe <= fixed + 16) return unexpected(status::unsupported, "device CQ too small", "verbs");
    if (d.credits.total() + fixed > max_cqe) d.credits = detail::cq_credits(max_cqe - fixed);
    if ((d.cq = ibv_create_cq(d.ctx, static_cast<int>(d.credits.total() + fixed), nullptr, d.channel, 0)) == nullptr)
      return fail(errno, "ibv_create_cq");

    ibv_srq_init_attr sa{};
    sa.attr.max_wr = d.opts.srq_depth;
    sa.attr.max_sge = 1;
    if ((d.srq = ibv_create_srq(d.pd, &sa)) == nullptr) return fail(errno, "ibv_create_srq");
    const std::size_t bounce_bytes = static_cast<std::size_t>(d.opts.srq_depth) * d.opts.msg_size;
    d.bounce = detail::page_aligned(bounce_bytes);
    d.ud_buf = detail::page_aligned(2 * detail::ud_slots * detail::ud_slot_size);
    d.words = detail::page_aligned(4096);
    if (!d.bounce || !d.ud_buf || !d.words) return unexpected(status::no_memory, "bounce buffers", "verbs");
    std::memset(d.words.get(), 0, 4096);
    // Flags as int: ibv_reg_mr is a macro that mixes them with another enum.
    const int local = IBV_ACCESS_LOCAL_WRITE, remote_read = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;
    if ((d.bounce_mr = ibv_reg_mr(d.pd, d.bounce.get(), bounce_bytes, local)) == nullptr)
      return fail(errno, "ibv_reg_mr(receive buffers)");
    if ((d.ud_mr = ibv_reg_mr(d.pd, d.ud_buf.get(), 2 * detail::ud_slots * detail::ud_slot_size, local)) == nullptr)
      return fail(errno, "ibv_reg_mr(handshake buffers)");
    if ((d.flush_mr = ibv_reg_mr(d.pd, d.flush_word(), 8, remote_read)) == nullptr)
      return fail(errno, "ibv_reg_mr(flush word)");
    if ((d.scratch_mr = ibv_reg_mr(d.pd, d.scratch_word(), 8, local)) == nullptr)
      return fail(errno, "ibv_reg_mr(flush landing)");
    {
      detail::srq_refill fill(d);
      for (std::uint32_t i = 0; i < d.opts.srq_depth; ++i) fill.add(i);
    }

    auto ud = detail::create_ud_qp(d);
    if (!ud) return unexpected(std::move(ud).error());
    d.ud_qp = *ud;
    for (std::uint32_t i = 0; i < detail::ud_slots; ++i) detail::repost_ud(d, i);
    d.ud_send_free = (1u << detail::ud_slots) - 1;

    // How much inline data the device grants, and whether it offers the
    // extended send API: ask on a probe queue pair.
    ibv_qp_ex* probe_ex = nullptr;
    ibv_qp_ex** want_ex = d.opts.wr_api ? &probe_ex : nullptr;
    ibv_qp* probe = detail::create_rc_qp(d, d.opts.max_inline, want_ex);
    if (probe == nullptr) {
      d.opts.max_inline = 0;
      probe = detail::create_rc_qp(d, 0, want_ex);
    }
    if (probe == nullptr) return fail(errno, "ibv_create_qp(RC)");
    d.wr_api = probe_ex != nullptr;
    ibv_qp_attr qa{};
    ibv_qp_init_attr qi{};
    d.max_inline = ibv_query_qp(probe, &qa, IBV_QP_CAP, &qi) == 0 ? std::min(qi.cap.max_inline_data, d.opts.max_inline)
                                                                  : d.opts.max_inline;
    ibv_destroy_qp(probe);

    const auto id = fabrix::detail::draw_domain_identity();
    d.nonce = id.nonce;
    d.secret = id.secret;
    return {};
  }

  std::unique_ptr<detail::domain_state> d_;
};

}  // namespace fabrix::verbs::detail
