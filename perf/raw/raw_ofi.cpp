// raw_ofi: fabrix-perf's loops written directly on libfabric, the baseline
// compare.py measures fabrix against (Debian ships no fabtests, and
// fi_pingpong sleeps while it waits).
//
//   raw_ofi --loopback --provider shm [--tests write:bw,send:lat] [-s 8,4096] ...
//
// Setup as fi_rma_bw / fi_rdm_pingpong do it: fi_getinfo for FI_EP_RDM with
// FI_MSG | FI_RMA (only what the tests use) from the provider named on the
// command line, FI_THREAD_DOMAIN, a CQ of FI_CQ_FORMAT_CONTEXT without a wait
// object, an AV, one endpoint; memory this program mmaps and registers with
// fi_mr_reg. Addresses and keys travel over the loopback socket.
// Every wait busy-polls fi_cq_read (never fi_cq_sread or a wait set).
// Writes and reads: fi_write / fi_read (fi_writemsg / fi_readmsg with FI_MORE
// on all but the last of a post list). The latency loops use fi_inject_write
// / fi_inject at or below the provider's inject_size, as fi_rdm_pingpong
// does (--no-inject: always a completion). --delivery-complete posts writes
// and sends with FI_DELIVERY_COMPLETE, the semantics fabrix's ofi provider
// asks for, to tell that cost from the rest.
#include "loops.hpp"

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <sys/mman.h>

namespace fabrix::raw {
namespace {

[[noreturn]] void fi_fail(const char* what, ssize_t ret) {
  fail(std::string(what) + ": " + fi_strerror(static_cast<int>(-ret)) + " (" + std::to_string(ret) + ")");
}

class ofi_net {
 public:
  ofi_net(const options& o, const perf::layout& lay)
      : depth_(static_cast<std::uint32_t>(o.tx_depth)),
        bytes_(lay.total),
        scratch_(lay.results),
        timeout_s_(o.timeout_s) {
    inject_ = o.inject && !o.delivery_complete;
    dc_ = o.delivery_complete;
    fi_info* hints = fi_allocinfo();
    hints->caps = FI_MSG | FI_RMA;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->ep_attr->type = FI_EP_RDM;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    hints->fabric_attr->prov_name = strdup(o.provider.c_str());
    const int ret = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info_);
    fi_freeinfo(hints);
    if (ret != 0) fi_fail(("fi_getinfo for FI_EP_RDM, FI_MSG | FI_RMA on '" + o.provider + "'").c_str(), ret);
    inject_size_ = info_->tx_attr->inject_size;
    if (ssize_t r = fi_fabric(info_->fabric_attr, &fabric_, nullptr)) fi_fail("fi_fabric", r);
    if (ssize_t r = fi_domain(fabric_, info_, &domain_, nullptr)) fi_fail("fi_domain", r);
    fi_cq_attr cq{};
    cq.format = FI_CQ_FORMAT_CONTEXT;
    cq.wait_obj = FI_WAIT_NONE;
    cq.size = std::max<std::size_t>(1024, 2 * depth_);
    if (ssize_t r = fi_cq_open(domain_, &cq, &cq_, nullptr)) fi_fail("fi_cq_open", r);
    fi_av_attr av{};
    av.type = FI_AV_UNSPEC;
    av.count = 2;
    if (ssize_t r = fi_av_open(domain_, &av, &av_, nullptr)) fi_fail("fi_av_open", r);
    if (ssize_t r = fi_endpoint(domain_, info_, &ep_, nullptr)) fi_fail("fi_endpoint", r);
    if (ssize_t r = fi_ep_bind(ep_, &av_->fid, 0)) fi_fail("fi_ep_bind av", r);
    if (ssize_t r = fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV)) fi_fail("fi_ep_bind cq", r);
    if (ssize_t r = fi_enable(ep_)) fi_fail("fi_enable", r);

    void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) fail("mmap " + std::to_string(bytes_) + " bytes");
    mem_ = static_cast<std::byte*>(p);
    const std::uint64_t mode = static_cast<std::uint64_t>(info_->domain_attr->mr_mode);
    const std::uint64_t access = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE | FI_SEND | FI_RECV;
    if (ssize_t r = fi_mr_reg(domain_, mem_, bytes_, access, 0, 1, 0, &mr_, nullptr)) fi_fail("fi_mr_reg", r);
    if (mode & FI_MR_ENDPOINT) {
      if (ssize_t r = fi_mr_bind(mr_, &ep_->fid, 0)) fi_fail("fi_mr_bind", r);
      if (ssize_t r = fi_mr_enable(mr_)) fi_fail("fi_mr_enable", r);
    }
    desc_ = fi_mr_desc(mr_);
    ctx_.resize(depth_);
    for (std::uint32_t i = 0; i < depth_; ++i) free_.push_back(depth_ - 1 - i);
  }
  ofi_net(const ofi_net&) = delete;
  ofi_net& operator=(const ofi_net&) = delete;
  ~ofi_net() {
    if (ep_) fi_close(&ep_->fid);
    if (mr_) fi_close(&mr_->fid);
    if (av_) fi_close(&av_->fid);
    if (cq_) fi_close(&cq_->fid);
    if (domain_) fi_close(&domain_->fid);
    if (fabric_) fi_close(&fabric_->fid);
    if (info_) fi_freeinfo(info_);
    if (mem_) ::munmap(mem_, bytes_);
  }

  // What the peer needs: endpoint name, region address (as its RMA calls
  // want it) and key.
  std::string local_address() {
    char name[256];
    std::size_t len = sizeof name;
    if (ssize_t r = fi_getname(&ep_->fid, name, &len)) fi_fail("fi_getname", r);
    const bool virt = (info_->domain_attr->mr_mode & FI_MR_VIRT_ADDR) != 0;
    const std::uint64_t words[2] = {virt ? reinterpret_cast<std::uint64_t>(mem_) : 0, fi_mr_key(mr_)};
    return std::string(reinterpret_cast<const char*>(words), sizeof words) + std::string(name, len);
  }
  void connect(const std::string& peer) {
    if (peer.size() <= 16) fail("a short address from the peer");
    std::memcpy(&remote_base_, peer.data(), 8);
    std::memcpy(&rkey_, peer.data() + 8, 8);
    if (fi_av_insert(av_, peer.data() + 16, 1, &peer_, 0, nullptr) != 1) fail("fi_av_insert of the peer's address");
  }
  std::string describe() const {
    return std::string("{\"provider\": ") + quoted(info_->fabric_attr->prov_name) +
           ", \"fabric\": " + quoted(info_->fabric_attr->name) + ", \"domain\": " + quoted(info_->domain_attr->name) +
           ", \"inject_size\": " + std::to_string(inject_size_) + ", \"inject\": " + (inject_ ? "true" : "false") +
           ", \"delivery_complete\": " + (dc_ ? "true" : "false") +
           ", \"progress\": " + quoted(info_->domain_attr->data_progress == FI_PROGRESS_AUTO ? "auto" : "manual") +
           ", \"memory\": \"mmap + fi_mr_reg\"}";
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
      const std::uint32_t slot = free_.back();
      void* ctx = &ctx_[slot];
      ssize_t r;
      if (n == 1 && !dc_) {
        r = t == test_kind::read ? fi_read(ep_, local_, size_, desc_, peer_, raddr_, rkey_, ctx)
                                 : fi_write(ep_, local_, size_, desc_, peer_, raddr_, rkey_, ctx);
      } else {
        iovec iov{local_, size_};
        fi_rma_iov rma{raddr_, size_, rkey_};
        fi_msg_rma msg{&iov, &desc_, 1, peer_, &rma, 1, ctx, 0};
        const std::uint64_t flags = FI_COMPLETION | (i + 1 < n ? FI_MORE : 0) | (dc_ ? FI_DELIVERY_COMPLETE : 0);
        r = t == test_kind::read ? fi_readmsg(ep_, &msg, flags) : fi_writemsg(ep_, &msg, flags);
      }
      if (r == -FI_EAGAIN) return i;
      if (r != 0) fi_fail(t == test_kind::read ? "fi_read" : "fi_write", r);
      free_.pop_back();
    }
    return n;
  }

  std::uint64_t post_one(test_kind t) {
    const bool inj = inject_ && size_ <= inject_size_;
    for (;;) {
      ssize_t r;
      void* ctx = &ctx_[free_.back()];  // taken below when a completion will come
      if (t == test_kind::write) {
        if (inj)
          r = fi_inject_write(ep_, local_, size_, peer_, raddr_, rkey_);
        else if (!dc_)
          r = fi_write(ep_, local_, size_, desc_, peer_, raddr_, rkey_, ctx);
        else {
          iovec iov{local_, size_};
          fi_rma_iov rma{raddr_, size_, rkey_};
          fi_msg_rma msg{&iov, &desc_, 1, peer_, &rma, 1, ctx, 0};
          r = fi_writemsg(ep_, &msg, FI_COMPLETION | FI_DELIVERY_COMPLETE);
        }
      } else {
        if (inj)
          r = fi_inject(ep_, local_, size_, peer_);
        else if (!dc_)
          r = fi_send(ep_, local_, size_, desc_, peer_, ctx);
        else {
          iovec iov{local_, size_};
          fi_msg msg{&iov, &desc_, 1, peer_, ctx, 0};
          r = fi_sendmsg(ep_, &msg, FI_COMPLETION | FI_DELIVERY_COMPLETE);
        }
      }
      if (r == 0 && inj) return 0;
      if (r == 0) {
        free_.pop_back();
        return 1;
      }
      if (r != -FI_EAGAIN) fi_fail(t == test_kind::write ? "write" : "send", r);
      carried_ += poll(recv_carried_);
    }
  }

  void post_recv() {
    for (;;) {
      const ssize_t r = fi_recv(ep_, rx_, size_, desc_, FI_ADDR_UNSPEC, &recv_ctx_);
      if (r == 0) return;
      if (r != -FI_EAGAIN) fi_fail("fi_recv", r);
      carried_ += poll(recv_carried_);
    }
  }

  std::uint64_t poll(bool& recv_done) {
    fi_cq_entry e[64];
    const ssize_t n = fi_cq_read(cq_, e, 64);
    std::uint64_t done = carried_;
    carried_ = 0;
    if (recv_carried_) recv_done = true;
    recv_carried_ = false;
    if (n > 0) {
      for (ssize_t i = 0; i < n; ++i) {
        if (e[i].op_context == &recv_ctx_) {
          recv_done = true;
          continue;
        }
        free_.push_back(static_cast<std::uint32_t>(static_cast<fi_context2*>(e[i].op_context) - ctx_.data()));
        ++done;
      }
    } else if (n != -FI_EAGAIN) {
      fi_cq_err_entry err{};
      if (n == -FI_EAVAIL && fi_cq_readerr(cq_, &err, 0) > 0)
        fail(std::string("error completion: ") + fi_strerror(err.err) + " (" +
             fi_cq_strerror(cq_, err.prov_errno, err.err_data, nullptr, 0) + ")");
      fi_fail("fi_cq_read", n);
    }
    return done;
  }

  // A completed write may not be in place yet: rxm completes it once sent,
  // shm once queued for the peer (or at once after a direct CMA copy).
  // flush() (untimed) posts a write with FI_DELIVERY_COMPLETE, which
  // completes once placed — after every write the peer's in-order queue
  // (shm) held before it — then, where the provider orders reads after
  // writes (FI_ORDER_RAW: rxm), a read of the target, and waits for both.
  // The server then checks once: a byte not in place is a failure.
  void flush() {
    iovec iov{local_, size_};
    fi_rma_iov rma{raddr_, size_, rkey_};
    fi_msg_rma msg{&iov, &desc_, 1, peer_, &rma, 1, &ctx_[free_.back()], 0};
    wait_one([&] { return fi_writemsg(ep_, &msg, FI_COMPLETION | FI_DELIVERY_COMPLETE); }, "fi_writemsg (flush)");
    if (info_->tx_attr->msg_order & FI_ORDER_RAW)
      wait_one([&] { return fi_read(ep_, mem_ + scratch_, 1, desc_, peer_, raddr_, rkey_, &ctx_[free_.back()]); },
               "fi_read (flush)");
  }

 private:
  // Posts one operation (retrying on back-pressure) and waits for it alone
  // (nothing else is in flight).
  template <class Post>
  void wait_one(Post&& post, const char* what) {
    for (;;) {
      const ssize_t r = post();
      if (r == 0) break;
      if (r != -FI_EAGAIN) fi_fail(what, r);
      carried_ += poll(recv_carried_);
    }
    free_.pop_back();
    bool recv_done = false;
    deadline until(timeout_s_);
    while (poll(recv_done) == 0)
      if (until.passed()) fail(std::string(what) + " did not complete in " + std::to_string(timeout_s_) + " s");
  }

  std::uint32_t depth_;
  std::size_t bytes_;
  std::uint64_t scratch_;  // where flush() reads into
  int timeout_s_;
  bool inject_ = true, dc_ = false;
  std::size_t inject_size_ = 0;
  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_av* av_ = nullptr;
  fid_ep* ep_ = nullptr;
  fid_mr* mr_ = nullptr;
  std::byte* mem_ = nullptr;
  void* desc_ = nullptr;
  fi_addr_t peer_ = FI_ADDR_UNSPEC;
  std::uint64_t remote_base_ = 0, rkey_ = 0;
  std::vector<fi_context2> ctx_;  // one per slot in flight (FI_CONTEXT mode)
  std::vector<std::uint32_t> free_;
  fi_context2 recv_ctx_{};
  std::byte* local_ = nullptr;
  std::byte* rx_ = nullptr;
  std::uint64_t raddr_ = 0, size_ = 0;
  std::uint64_t carried_ = 0;  // completions a retrying post polled, for the next poll()
  bool recv_carried_ = false;
};

int side(channel ch, bool server, const options& o) {
  const std::string mine = agreement(o);
  const std::string theirs = ch.exchange(mine);
  if (theirs != mine) fail_usage("options differ: peer has '" + theirs + "', this side '" + mine + "'");
  std::uint64_t max_size = 8;
  for (auto s : o.sizes) max_size = std::max(max_size, s);
  const perf::layout lay = perf::layout::make(max_size, static_cast<std::uint64_t>(o.tx_depth));
  ofi_net net(o, lay);
  net.connect(ch.exchange(net.local_address()));
  if (!server)
    std::printf("{\"tool\": \"raw_ofi\", \"header\": true, \"clock\": %s, \"ofi\": %s}\n",
                quoted(ticks().source()).c_str(), net.describe().c_str());
  run_steps(net, ch, o, lay, server, "raw_ofi");
  (void)ch.exchange("bye");
  return 0;
}

}  // namespace
}  // namespace fabrix::raw

int main(int argc, char** argv) {
  using namespace fabrix::raw;
  options o;
  const auto own = [](std::string_view a, const char* v, options& opt) {
    if (a == "--provider") {
      if (!v) fail_usage("--provider needs a libfabric provider name");
      opt.provider = v;
      return 2;
    }
    if (a == "--no-inject") return opt.inject = false, 1;
    if (a == "--delivery-complete") return opt.delivery_complete = true, 1;
    return 0;
  };
  if (auto stop = read_command_line(
          "raw_ofi", argc, argv, o, own,
          "usage: raw_ofi --loopback --provider NAME [options]\n"
          "       raw_ofi --server --provider NAME [options]   then   raw_ofi --provider NAME [options]\n"
          "fabrix-perf's bandwidth and ping-pong loops written directly on libfabric (FI_EP_RDM),\n"
          "busy-polling fi_cq_read; server and client meet on 127.0.0.1.\n"
          "  --provider NAME         libfabric provider: shm, tcp;ofi_rxm, tcp (required)\n"
          "  --no-inject             latency loops: no fi_inject*, wait for every completion\n"
          "  --delivery-complete     writes and sends with FI_DELIVERY_COMPLETE (fabrix's semantics)\n"))
    return *stop;
  if (o.provider.empty()) {
    std::fprintf(stderr, "raw_ofi: --provider NAME is required (shm, tcp;ofi_rxm)\n");
    return 2;
  }
  return run_sides("raw_ofi", o, [&](channel ch, bool server) { return side(std::move(ch), server, o); });
}
