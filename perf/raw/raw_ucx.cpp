// raw_ucx: fabrix-perf's loops written directly on UCP, the second UCX
// baseline beside ucx_perftest: the same loop as fabrix-perf, so a
// difference from fabrix-perf is library cost, and a difference from
// ucx_perftest is the loop's.
//
//   UCX_TLS=sysv,posix,cma raw_ucx --loopback [--tests write:bw,write:lat] [-s 8,4096] ...
//
// Setup: ucp_init with UCP_FEATURE_RMA | UCP_FEATURE_TAG (UCX_TLS from the
// environment, or --transport), one single-threaded worker, an endpoint to
// the peer's worker address, one region mapped with ucp_mem_map —
// UCP_MEM_MAP_ALLOCATE by default, as ucx_perftest does; --alloc user maps
// memory this program mmaps. Addresses and packed rkeys travel over the
// loopback socket. Writes and reads are ucp_put_nbx / ucp_get_nbx, sends and
// receives ucp_tag_send_nbx / ucp_tag_recv_nbx; an operation UCX finishes at
// once (NULL) counts as completed there, the others through their callback.
// Every wait busy-calls ucp_worker_progress. After write bw, ucp_worker_flush_nbx
// (untimed) makes every put visible before the target checks the bytes.
#include "loops.hpp"

#include <sys/mman.h>
#include <ucp/api/ucp.h>

#include <cstdlib>

namespace fabrix::raw {
namespace {

[[noreturn]] void ucs_fail(const std::string& what, ucs_status_t s) { fail(what + ": " + ucs_status_string(s)); }

constexpr ucp_tag_t tag = 0x7261770000000001ull;

class ucx_net {
 public:
  ucx_net(const options& o, std::size_t bytes) : bytes_(bytes), user_(o.alloc == "user"), timeout_s_(o.timeout_s) {
    ucp_config_t* cfg = nullptr;
    if (ucs_status_t s = ucp_config_read(nullptr, nullptr, &cfg); s != UCS_OK) ucs_fail("ucp_config_read", s);
    if (!o.transport.empty())
      if (ucs_status_t s = ucp_config_modify(cfg, "TLS", o.transport.c_str()); s != UCS_OK)
        ucs_fail("UCX_TLS=" + o.transport, s);
    const char* env = std::getenv("UCX_TLS");
    tls_ = !o.transport.empty() ? o.transport : env ? env : "all";
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_RMA | UCP_FEATURE_TAG;
    const ucs_status_t s = ucp_init(&params, cfg, &context_);
    ucp_config_release(cfg);
    if (s != UCS_OK) ucs_fail("ucp_init", s);
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    if (ucs_status_t w = ucp_worker_create(context_, &wp, &worker_); w != UCS_OK) ucs_fail("ucp_worker_create", w);

    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    mp.length = bytes_;
    if (user_) {
      void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) fail("mmap " + std::to_string(bytes_) + " bytes");
      user_mem_ = p;
      mp.address = p;
    } else {
      mp.flags = UCP_MEM_MAP_ALLOCATE;
    }
    if (ucs_status_t m = ucp_mem_map(context_, &mp, &memh_); m != UCS_OK) ucs_fail("ucp_mem_map", m);
    ucp_mem_attr_t ma{};
    ma.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS;
    if (ucs_status_t q = ucp_mem_query(memh_, &ma); q != UCS_OK) ucs_fail("ucp_mem_query", q);
    mem_ = static_cast<std::byte*>(ma.address);

    send_prm_.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    send_prm_.cb.send = on_send;
    send_prm_.user_data = this;
    recv_prm_.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    recv_prm_.cb.recv = on_recv;
    recv_prm_.user_data = this;
  }
  ucx_net(const ucx_net&) = delete;
  ucx_net& operator=(const ucx_net&) = delete;
  ~ucx_net() {
    if (rkey_) ucp_rkey_destroy(rkey_);
    if (memh_) ucp_mem_unmap(context_, memh_);
    if (worker_) ucp_worker_destroy(worker_);
    if (context_) ucp_cleanup(context_);
    if (user_mem_) ::munmap(user_mem_, bytes_);
  }

  // Worker address, region address and packed rkey.
  std::string local_address() {
    ucp_address_t* addr = nullptr;
    std::size_t alen = 0;
    if (ucs_status_t s = ucp_worker_get_address(worker_, &addr, &alen); s != UCS_OK)
      ucs_fail("ucp_worker_get_address", s);
    void* rk = nullptr;
    std::size_t rlen = 0;
    if (ucs_status_t s = ucp_rkey_pack(context_, memh_, &rk, &rlen); s != UCS_OK) ucs_fail("ucp_rkey_pack", s);
    const std::uint64_t head[3] = {reinterpret_cast<std::uint64_t>(mem_), alen, rlen};
    std::string out(reinterpret_cast<const char*>(head), sizeof head);
    out.append(reinterpret_cast<const char*>(addr), alen);
    out.append(static_cast<const char*>(rk), rlen);
    ucp_worker_release_address(worker_, addr);
    ucp_rkey_buffer_release(rk);
    return out;
  }
  void connect(const std::string& peer) {
    std::uint64_t head[3];
    if (peer.size() < sizeof head) fail("a short address from the peer");
    std::memcpy(head, peer.data(), sizeof head);
    if (peer.size() != sizeof head + head[1] + head[2]) fail("a malformed address from the peer");
    remote_base_ = head[0];
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep.address = reinterpret_cast<const ucp_address_t*>(peer.data() + sizeof head);
    if (ucs_status_t s = ucp_ep_create(worker_, &ep, &ep_); s != UCS_OK) ucs_fail("ucp_ep_create", s);
    if (ucs_status_t s = ucp_ep_rkey_unpack(ep_, peer.data() + sizeof head + head[1], &rkey_); s != UCS_OK)
      ucs_fail("ucp_ep_rkey_unpack", s);
  }
  std::string describe() const {
    return std::string("{\"version\": ") + quoted(ucp_get_version_string()) + ", \"tls\": " + quoted(tls_) +
           ", \"memory\": " + quoted(user_ ? "mmap + ucp_mem_map" : "ucp_mem_map ALLOCATE") + "}";
  }

  std::byte* at(std::uint64_t off) const noexcept { return mem_ + off; }
  void aim(std::uint64_t local, std::uint64_t remote, std::uint64_t rx, std::uint64_t size) noexcept {
    local_ = mem_ + local;
    raddr_ = remote_base_ + remote;
    rx_ = mem_ + rx;
    size_ = size;
  }

  std::uint64_t post_rma(test_kind t, std::uint64_t n) {
    for (std::uint64_t i = 0; i < n; ++i) {
      const ucs_status_ptr_t r = t == test_kind::read ? ucp_get_nbx(ep_, local_, size_, raddr_, rkey_, &send_prm_)
                                                      : ucp_put_nbx(ep_, local_, size_, raddr_, rkey_, &send_prm_);
      if (r == nullptr)
        ++done_;
      else if (UCS_PTR_IS_ERR(r))
        ucs_fail(t == test_kind::read ? "ucp_get_nbx" : "ucp_put_nbx", UCS_PTR_STATUS(r));
    }
    return n;
  }

  std::uint64_t post_one(test_kind t) {
    const ucs_status_ptr_t r = t == test_kind::write ? ucp_put_nbx(ep_, local_, size_, raddr_, rkey_, &send_prm_)
                                                     : ucp_tag_send_nbx(ep_, local_, size_, tag, &send_prm_);
    if (r == nullptr) return 0;
    if (UCS_PTR_IS_ERR(r)) ucs_fail(t == test_kind::write ? "ucp_put_nbx" : "ucp_tag_send_nbx", UCS_PTR_STATUS(r));
    return 1;
  }

  void post_recv() {
    const ucs_status_ptr_t r = ucp_tag_recv_nbx(worker_, rx_, size_, tag, ~ucp_tag_t{0}, &recv_prm_);
    if (r == nullptr)
      recv_ = true;
    else if (UCS_PTR_IS_ERR(r))
      ucs_fail("ucp_tag_recv_nbx", UCS_PTR_STATUS(r));
  }

  std::uint64_t poll(bool& recv_done) {
    ucp_worker_progress(worker_);
    if (error_ != UCS_OK) ucs_fail("an operation completed", error_);
    const std::uint64_t d = done_;
    done_ = 0;
    if (recv_) recv_done = true;
    recv_ = false;
    return d;
  }

  void flush() {
    bool flushed = false;
    ucp_request_param_t prm{};
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    prm.cb.send = [](void* req, ucs_status_t, void* user) {
      *static_cast<bool*>(user) = true;
      ucp_request_free(req);
    };
    prm.user_data = &flushed;
    const ucs_status_ptr_t r = ucp_worker_flush_nbx(worker_, &prm);
    if (UCS_PTR_IS_ERR(r)) ucs_fail("ucp_worker_flush_nbx", UCS_PTR_STATUS(r));
    if (r == nullptr) flushed = true;
    deadline until(timeout_s_);
    while (!flushed) {
      ucp_worker_progress(worker_);
      if (until.passed()) fail("ucp_worker_flush_nbx did not complete in " + std::to_string(timeout_s_) + " s");
    }
  }

  // Closes the endpoint, flushing it (the peer keeps progressing meanwhile).
  void close() {
    if (!ep_) return;
    if (rkey_) ucp_rkey_destroy(rkey_);
    rkey_ = nullptr;
    ucp_request_param_t prm{};
    const ucs_status_ptr_t r = ucp_ep_close_nbx(ep_, &prm);
    ep_ = nullptr;
    if (UCS_PTR_IS_PTR(r)) {
      deadline until(timeout_s_);
      while (ucp_request_check_status(r) == UCS_INPROGRESS) {
        ucp_worker_progress(worker_);
        if (until.passed()) fail("ucp_ep_close_nbx did not complete in " + std::to_string(timeout_s_) + " s");
      }
      ucp_request_free(r);
    }
  }

 private:
  static void on_send(void* req, ucs_status_t s, void* user) {
    auto* self = static_cast<ucx_net*>(user);
    if (s != UCS_OK) self->error_ = s;
    ++self->done_;
    ucp_request_free(req);
  }
  static void on_recv(void* req, ucs_status_t s, const ucp_tag_recv_info_t*, void* user) {
    auto* self = static_cast<ucx_net*>(user);
    if (s != UCS_OK) self->error_ = s;
    self->recv_ = true;
    ucp_request_free(req);
  }

  std::size_t bytes_;
  bool user_;
  int timeout_s_;
  std::string tls_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_ep_h ep_ = nullptr;
  ucp_mem_h memh_ = nullptr;
  ucp_rkey_h rkey_ = nullptr;
  void* user_mem_ = nullptr;
  std::byte* mem_ = nullptr;
  std::uint64_t remote_base_ = 0;
  ucp_request_param_t send_prm_{}, recv_prm_{};
  std::byte* local_ = nullptr;
  std::byte* rx_ = nullptr;
  std::uint64_t raddr_ = 0, size_ = 0;
  std::uint64_t done_ = 0;  // completions since the last poll()
  bool recv_ = false;
  ucs_status_t error_ = UCS_OK;
};

int side(channel ch, bool server, const options& o) {
  const std::string mine = agreement(o);
  const std::string theirs = ch.exchange(mine);
  if (theirs != mine) fail_usage("options differ: peer has '" + theirs + "', this side '" + mine + "'");
  std::uint64_t max_size = 8;
  for (auto s : o.sizes) max_size = std::max(max_size, s);
  const perf::layout lay = perf::layout::make(max_size, static_cast<std::uint64_t>(o.tx_depth));
  ucx_net net(o, lay.total);
  net.connect(ch.exchange(net.local_address()));
  if (!server)
    std::printf("{\"tool\": \"raw_ucx\", \"header\": true, \"clock\": %s, \"ucx\": %s}\n",
                quoted(ticks().source()).c_str(), net.describe().c_str());
  run_steps(net, ch, o, lay, server, "raw_ucx");
  (void)ch.exchange("bye");
  // One side closes at a time while the other keeps progressing (both at
  // once over tcp tripped an assertion in ucp_worker_destroy, UCX 1.13).
  auto progress = [&] {
    bool r = false;
    (void)net.poll(r);
  };
  if (!server) (void)ch.recv_progressing(progress, o.timeout_s);
  net.close();
  ch.send_u64(1);
  if (server) (void)ch.recv_progressing(progress, o.timeout_s);
  return 0;
}

}  // namespace
}  // namespace fabrix::raw

int main(int argc, char** argv) {
  using namespace fabrix::raw;
  options o;
  const auto own = [](std::string_view a, const char* v, options& opt) {
    if (a == "--transport" || a == "--alloc") {
      if (!v) fail_usage(std::string(a) + " needs a value");
      if (a == "--transport")
        opt.transport = v;
      else if (std::string_view(v) == "provider" || std::string_view(v) == "user")
        opt.alloc = v;
      else
        fail_usage("--alloc provider|user");
      return 2;
    }
    return 0;
  };
  if (auto stop = read_command_line(
          "raw_ucx", argc, argv, o, own,
          "usage: raw_ucx --loopback [options]\n"
          "       raw_ucx --server [options]   then   raw_ucx [options]\n"
          "fabrix-perf's bandwidth and ping-pong loops written directly on UCP, busy-calling\n"
          "ucp_worker_progress; server and client meet on 127.0.0.1.\n"
          "  --transport LIST        UCX_TLS for this run (default: the environment's)\n"
          "  --alloc provider|user   ucp_mem_map ALLOCATE (default, as ucx_perftest) or mmap + ucp_mem_map\n"))
    return *stop;
  return run_sides("raw_ucx", o, [&](channel ch, bool server) { return side(std::move(ch), server, o); });
}
