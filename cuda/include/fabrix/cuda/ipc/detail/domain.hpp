// The cuda_ipc domain: one CUDA device of this process, a listening Unix
// socket (abstract name, in the address blob) through which peers on this
// node connect, the completion ring, the op pool with one CUDA event per
// slot, and the cache of peer allocations opened here.
//
// Progress: poll() reads every socket (notifications, messages, VMM fd
// requests, region releases) and finishes operations whose event has
// completed. wait() sleeps in poll(2) on the sockets; CUDA events have no
// fd, so while operations are in flight it wakes every millisecond to query
// them (documented in cuda/README.md).
//
// Peers on another node (boot id + host name differ) are refused at
// connect() with peer_unreachable.
#pragma once

#include <fabrix/capabilities.hpp>
#include <fabrix/cuda/ipc/detail/address.hpp>
#include <fabrix/cuda/ipc/detail/endpoint.hpp>
#include <fabrix/cuda/ipc/detail/handle.hpp>
#include <fabrix/cuda/ipc/detail/progress.hpp>
#include <fabrix/cuda/ipc/detail/region.hpp>
#include <fabrix/cuda/ipc/detail/socket.hpp>
#include <fabrix/cuda/ipc/detail/state.hpp>
#include <fabrix/cuda/ipc/native.hpp>
#include <fabrix/cuda/pointer.hpp>
#include <fabrix/cuda/runtime.hpp>
#include <fabrix/detail/describe_region.hpp>
#include <fabrix/detail/domain_identity.hpp>
#include <fabrix/domain_options.hpp>
#include <fabrix/memory.hpp>
#include <fabrix/remote_buffer.hpp>
#include <fabrix/result.hpp>

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace fabrix::cuda::ipc::detail {

inline constexpr capabilities cuda_ipc_caps{
    .rma = true,
    .write_with_imm = true,
    .atomics = true,
    .send_recv = true,
    .gpu = gpu_path::direct,  // the copy engines read and write peer GPU memory
    .max_sge = 16,
    // Copies and kernels run without the target. Exception: the first use of
    // a peer's VMM region fetches its fd, which the exporter answers in its
    // poll() / wait() (see cuda/README.md).
    .needs_target_progress = false,
};

// "" or "0" -> device 0; "cuda:1" or "1" -> device 1. -1 when unparsable.
inline int parse_device(const std::string& s) {
  std::string n = s.rfind("cuda:", 0) == 0 ? s.substr(5) : s;
  if (n.empty()) return 0;
  int v = 0;
  for (char c : n) {
    if (c < '0' || c > '9' || v > 1000) return -1;
    v = v * 10 + (c - '0');
  }
  return v;
}

class domain_impl {
 public:
  // domain::native(): the CUDA device (native.hpp).
  cuda_ipc::native_domain native() const noexcept { return {d_->device}; }
  static result<domain_impl> create(const domain_options& opts) {
    if (opts.max_outstanding == 0)
      return unexpected(status::invalid_argument, "max_outstanding must be > 0", "cuda_ipc");
    if (opts.max_posted_recvs == 0)
      return unexpected(status::invalid_argument, "max_posted_recvs must be > 0", "cuda_ipc");
    const int device = parse_device(opts.device);
    if (device < 0)
      return unexpected(status::invalid_argument, "device '" + opts.device + "' is not a CUDA ordinal", "cuda_ipc");
    int count = 0;
    if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess)
      return cuda_fail(e, "no CUDA device (cudaGetDeviceCount)", "cuda_ipc");
    if (device >= count)
      return unexpected(status::unsupported,
                        "no CUDA device " + std::to_string(device) + " (" + std::to_string(count) + " present)",
                        "cuda_ipc");
    device_guard on(device);  // first, so CUDA initializes on this device only
    auto drv = driver();
    if (!drv) return unexpected(std::move(drv).error());

    auto d = std::make_unique<detail::domain_state>(device, opts.max_outstanding, opts.max_posted_recvs);
    d->memcpy_async = (*drv)->memcpy_async;
    if (cudaError_t e =
            cudaMalloc(reinterpret_cast<void**>(&d->atomic_scratch), opts.max_outstanding * sizeof(unsigned long long));
        e != cudaSuccess)
      return cuda_fail(e, "cudaMalloc (atomic results)", "cuda_ipc");
    const auto id = fabrix::detail::draw_domain_identity();
    d->nonce = id.nonce;
    d->secret = id.secret;
    d->node = node_id();
    d->host = host_name();
    char name[64];
    std::snprintf(name, sizeof(name), "fabrix-cuda-ipc-%d-%016llx", static_cast<int>(::getpid()),
                  static_cast<unsigned long long>(d->nonce));
    d->socket_name = name;
    auto l = listen_abstract(d->socket_name);
    if (!l) return unexpected(std::move(l).error());
    d->listener = std::move(*l);
    d->bell = doorbell::create();  // none (memfd or seals unavailable): the sockets are read on every poll
    return domain_impl(std::move(d));
  }

  // Runs before the core's mapping check (a device pointer is mapped without
  // access there, which would read as "not readable").
  result<void> check_host_memory(const void* addr, std::size_t) {
    return refuse_device_memory_as_host(addr, "cuda_ipc");
  }

  result<region_impl> register_memory(void* addr, std::size_t len, memory_location where, access rights) {
    device_guard on(d_->device);
    const bool remote = (rights & access::all_remote) != access::local;
    remote_buffer rb = fabrix::detail::describe_region(provider_id::cuda_ipc, reinterpret_cast<std::uintptr_t>(addr),
                                                       len, where, rights, d_->nonce, d_->next_epoch++);
    bool host_registered = false, exported = false;

    auto info = query_pointer(addr);
    if (!info) return unexpected(std::move(info).error());
    if (where.kind == memory_kind::host) {
      // Device memory passed as host memory never gets here: the core asked
      // check_host_memory first.
      if (info->managed) return unexpected(status::unsupported, "cuda_ipc does not support managed memory", "cuda_ipc");
      if (remote)
        return unexpected(status::unsupported,
                          "cuda_ipc shares only CUDA device memory with peers; register host memory with "
                          "access::local (as a copy source or target) or use another provider",
                          "cuda_ipc");
      // Pinning only makes the copies asynchronous; where it is refused
      // (already pinned, a memlock limit) copies from pageable memory are
      // still correct, just staged by the driver.
      if (cudaHostRegister(addr, len, cudaHostRegisterPortable) == cudaSuccess)
        host_registered = true;
      else
        (void)cudaGetLastError();  // clear the thread's last error
    } else {
      if (info->location.kind != memory_kind::cuda_device)
        return unexpected(status::invalid_argument,
                          std::string("registered as cuda_device memory, but the pointer is ") +
                              (info->managed ? "managed memory (not supported by cuda_ipc)" : "not device memory"),
                          "cuda_ipc");
      if (info->location.device != where.device)
        return unexpected(status::invalid_argument,
                          "registered as memory of device " + std::to_string(where.device) + ", but it is on device " +
                              std::to_string(info->location.device),
                          "cuda_ipc");
      const auto start = reinterpret_cast<std::uintptr_t>(addr);
      if (start < info->base || len > info->size - (start - info->base))
        return unexpected(status::out_of_range, "the range runs past the end of its CUDA allocation", "cuda_ipc");
      if (remote) {
        ipc_handle h;
        h.device = static_cast<std::uint16_t>(info->location.device);
        h.buffer_id = info->buffer_id;
        h.allocation_size = info->size;
        h.offset = start - info->base;
        if (info->sharing == sharing::legacy) {
          cudaIpcMemHandle_t mh;
          if (cudaError_t e = cudaIpcGetMemHandle(&mh, reinterpret_cast<void*>(info->base)); e != cudaSuccess)
            return cuda_fail(e, "cudaIpcGetMemHandle", "cuda_ipc");
          h.kind = handle_kind::legacy;
          h.handle_size = legacy_handle_size;
          std::memcpy(h.handle.data(), &mh, legacy_handle_size);
        } else if (info->sharing == sharing::vmm) {
          auto fd = export_vmm(addr);
          if (!fd) return unexpected(std::move(fd).error());
          h = make_vmm_handle(h.device, h.buffer_id, h.allocation_size, h.offset, rb.epoch);
          d_->exports.push_back({rb.epoch, 0, std::move(*fd)});  // the seal is set below
        } else {
          return unexpected(status::unsupported,
                            "this device memory cannot be shared between processes (allocate it with cudaMalloc, or "
                            "with cuMemCreate and CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR; stream-ordered pool "
                            "memory is not supported)",
                            "cuda_ipc");
        }
        encode_handle(h, rb);
        exported = true;
      }
    }
    rb.seal = rb.compute_seal(d_->secret);
    if (exported && !d_->exports.empty() && d_->exports.back().id == rb.epoch) d_->exports.back().seal = rb.seal;
    return region_impl(d_.get(), rb, host_registered, exported);
  }

  // The sockets (notifications, messages, peers' fd requests and releases)
  // are read when a peer rang the doorbell, at least every millisecond, and,
  // while a peer does not ring, on every call (every 16th while copies are
  // in flight: a poll(2) costs about as much as launching a copy).
  std::size_t poll(std::span<completion> out) {
    device_guard on(d_->device);
    if (detail::links_due(*d_, detail::any_inflight(*d_))) detail::serve_links(*d_);
    detail::progress_inflight(*d_);
    return d_->ring.drain(out);
  }

  status wait(std::chrono::milliseconds timeout) {
    device_guard on(d_->device);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      detail::progress_inflight(*d_);
      if (!d_->ring.empty()) return status::ok;
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
      if (left <= 0) return status::timed_out;
      // CUDA events have no fd: with copies in flight, look again every 1 ms.
      const int step = detail::any_inflight(*d_) ? 1 : static_cast<int>(std::min<long long>(left, 1 << 30));
      detail::serve_links(*d_, step);
    }
  }

  result<std::vector<std::byte>> address() const {
    peer_address a{d_->nonce,
                   d_->node,
                   static_cast<std::uint32_t>(::getpid()),
                   process_token(),
                   static_cast<std::uint16_t>(d_->device),
                   d_->secret,
                   d_->socket_name,
                   d_->host};
    auto blob = encode_address(a);
    if (blob.empty()) return unexpected(status::provider_error, "host name too long for the address blob", "cuda_ipc");
    return blob;
  }

  result<endpoint_impl> connect(std::span<const std::byte> blob, std::uint32_t peer_id) {
    auto peer = parse_address(blob);
    if (!peer) return unexpected(std::move(peer).error());
    if (peer->node != d_->node)
      return unexpected(status::peer_unreachable,
                        "the peer runs on another node (host '" + peer->host + "', this is '" + d_->host +
                            "'); cuda_ipc reaches only GPUs of the same node",
                        "cuda_ipc");
    device_guard on(d_->device);
    auto fd = connect_abstract(peer->socket);
    if (!fd) return unexpected(std::move(fd).error());
    auto l = std::make_unique<detail::link>();
    l->fd = std::move(*fd);
    l->nonce = peer->nonce;
    l->outgoing = true;
    if (status s = detail::send_control(*l, packet_type::hello, d_->nonce, hello_proof(peer->secret, d_->nonce));
        s != status::ok)
      return unexpected(s, "sending hello to the peer failed", "cuda_ipc");
    auto p = std::make_unique<detail::peer_state>();
    p->dom = d_.get();
    p->peer_id = peer_id;
    p->nonce = peer->nonce;
    p->seq = d_->connects_to[peer->nonce]++;
    p->secret = peer->secret;
    // Same pid and same random token: this process (a pid alone repeats
    // across pid namespaces; the token alone survives fork()).
    p->same_process = peer->process == process_token() && peer->pid == static_cast<std::uint32_t>(::getpid());
    if (cudaError_t e = cudaStreamCreateWithFlags(&p->stream, cudaStreamNonBlocking); e != cudaSuccess)
      return cuda_fail(e, "cudaStreamCreateWithFlags", "cuda_ipc");
    p->out = l.get();
    d_->links.push_back(std::move(l));
    d_->peers.push_back(p.get());
    return endpoint_impl(std::move(p));
  }

  provider_id provider() const noexcept { return provider_id::cuda_ipc; }
  std::uint64_t owner() const noexcept { return d_->nonce; }
  capabilities runtime_caps() const noexcept { return cuda_ipc_caps; }
  std::string describe() const {
    cudaDeviceProp prop{};
    std::string name = cudaGetDeviceProperties(&prop, d_->device) == cudaSuccess ? prop.name : "unknown GPU";
    return "cuda_ipc, device " + std::to_string(d_->device) + " (" + name + "), CUDA runtime " + runtime_version();
  }
  static std::string runtime_version() {
    int v = 0;
    if (cudaRuntimeGetVersion(&v) != cudaSuccess) return "unknown";
    return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
  }

  int device() const noexcept { return d_->device; }
  // Malformed or unexpected packets from peers, dropped.
  std::uint64_t dropped_packets() const noexcept { return d_->dropped_packets; }
  // How often poll() / wait() have read the sockets (one poll(2) each).
  std::uint64_t socket_reads() const noexcept { return d_->socket_reads; }
  // Peer allocations currently mapped here.
  std::size_t mapped_allocations() const noexcept { return d_->cache.size(); }

 private:
  explicit domain_impl(std::unique_ptr<detail::domain_state> d) : d_(std::move(d)) {}

  // An fd for the VMM allocation mapped at `addr`.
  static result<unique_fd> export_vmm(void* addr) {
    auto drv = driver();
    if (!drv) return unexpected(std::move(drv).error());
    const driver_api& d = **drv;
    CUmemGenericAllocationHandle h = 0;
    if (CUresult r = d.mem_retain_allocation_handle(&h, addr); r != CUDA_SUCCESS)
      return driver_fail(r, "cuMemRetainAllocationHandle", "cuda_ipc");
    int fd = -1;
    const CUresult r = d.mem_export_to_shareable_handle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    d.mem_release(h);  // balances the retain; the exporter's own mapping keeps the allocation
    if (r != CUDA_SUCCESS) return driver_fail(r, "cuMemExportToShareableHandle(POSIX_FILE_DESCRIPTOR)", "cuda_ipc");
    return unique_fd(fd);
  }

  std::unique_ptr<detail::domain_state> d_;
};

}  // namespace fabrix::cuda::ipc::detail
