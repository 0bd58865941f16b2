// The UCX provider's state. domain_state and peer_state live on the heap so
// their addresses, handed to UCX as callback arguments, survive moves of the
// owning domain_impl / endpoint_impl.
#pragma once

#include <fabrix/completion.hpp>
#include <fabrix/detail/completion_ring.hpp>
#include <fabrix/detail/siphash.hpp>
#include <fabrix/detail/slot_pool.hpp>
#include <fabrix/remote_buffer.hpp>
#include <fabrix/ucx/liveness.hpp>
#include <fabrix/ucx/rkey_cache.hpp>

#include <ucp/api/ucp.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace fabrix::ucx::detail {

// Active-message ids on a fabrix worker.
inline constexpr unsigned am_notify = 17;
inline constexpr std::uint32_t notify_magic = 0x46425849;  // "FBXI"

// The whole payload of a write_with_imm notification (an AM header).
struct notify_header {
  std::uint32_t magic = notify_magic;
  std::uint32_t imm = 0;
  std::uint64_t bytes = 0;
};

struct peer_state;
struct domain_state;

// The unpacked rkeys of one endpoint (rkey_cache.hpp).
using rkey_cache = key_cache<ucp_rkey_h, &ucp_rkey_destroy>;

// Where an operation is. write_with_imm goes data -> imm_flush -> imm_notify;
// a flush posted while notifications are pending waits as `parked_flush`.
enum class stage : std::uint8_t { data, imm_flush, imm_notify, user_flush };

struct op_slot {
  completion c{};
  domain_state* dom = nullptr;
  peer_state* peer = nullptr;
  void* request = nullptr;    // outstanding recv request, for cancellation
  std::uint32_t pending = 0;  // UCX requests of the current stage, +1 while posting
  ucs_status_t first_error = UCS_OK;
  stage st = stage::data;
  bool in_use = false;
  bool abandoned = false;             // completion delivered early (dead peer); UCX still owns requests
  notify_header header{};             // AM header: must live until the AM completes
  std::uint64_t operand = 0;          // atomic operand buffer: must live until completion
  rkey_cache::entry* rkey = nullptr;  // held while UCX may use it: until the slot goes back (release_slot)
  op_slot* next = nullptr;            // deferred / parked list link
  op_slot* next_free = nullptr;       // slot_pool link
};

// Intrusive FIFO of slots (no allocation).
struct op_list {
  op_slot* head = nullptr;
  op_slot* tail = nullptr;
  bool empty() const noexcept { return head == nullptr; }
  void push_back(op_slot* op) noexcept {
    op->next = nullptr;
    if (tail)
      tail->next = op;
    else
      head = op;
    tail = op;
  }
  op_slot* pop_front() noexcept {
    op_slot* op = head;
    if (op) {
      head = op->next;
      if (!head) tail = nullptr;
      op->next = nullptr;
    }
    return op;
  }
};

// What is left of a closed endpoint while UCX still works on it: its flush
// and close requests (nullptr once done) and the rkeys those requests may
// still use. The domain finishes these in poll()/wait() and, bounded, before
// destroying the worker.
struct closing_endpoint {
  void* flush = nullptr;
  void* close = nullptr;
  std::vector<ucp_rkey_h> rkeys;
};

// Frees `req` (a request posted without callback) once it has completed.
inline void reap_request(void*& req) noexcept {
  if (req && ucp_request_check_status(req) != UCS_INPROGRESS) {
    ucp_request_free(req);
    req = nullptr;
  }
}

struct domain_state {
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  int event_fd = -1;
  std::uint64_t nonce = 0;            // random: names this domain in remote_buffers and tags
  fabrix::detail::seal_key secret{};  // random: seals our remote_buffers; given to connected peers
  std::uint64_t next_epoch = 1;
  std::string transport;  // UCX_TLS in force, for describe()
  // ucp_context_query lists UCS_MEMORY_TYPE_CUDA: this UCX build (its cuda
  // transports) registers and moves device memory itself. Debian 12's UCX
  // 1.13.1 is built without CUDA, so this is false there.
  bool cuda_memory = false;
  fabrix::detail::completion_ring ring;
  fabrix::detail::slot_pool<op_slot> ops;
  op_list deferred;                         // slots whose next stage starts in poll()
  std::uint64_t dropped_notifications = 0;  // malformed notify AMs from peers
  process_identity self = self_identity();
  std::vector<peer_state*> watched;  // peers whose liveness fabrix checks itself
  std::chrono::steady_clock::time_point next_liveness_check{};
  std::uint32_t polls_since_check = 0;
  std::vector<closing_endpoint> closing;  // endpoints whose close outlived their teardown

  explicit domain_state(std::size_t max_outstanding) : ring(max_outstanding), ops(max_outstanding) {}
  domain_state(const domain_state&) = delete;
  domain_state& operator=(const domain_state&) = delete;

  // Frees the requests of closing endpoints that have completed, and their
  // rkeys once both requests are done. No UCX progress of its own.
  void reap_closing() noexcept {
    std::erase_if(closing, [](closing_endpoint& c) {
      reap_request(c.flush);
      reap_request(c.close);
      if (c.flush || c.close) return false;
      for (ucp_rkey_h k : c.rkeys) ucp_rkey_destroy(k);
      return true;
    });
  }

  // Order: every endpoint close is finished (progressing the worker, at most
  // `close_limit`) before the worker is destroyed — UCX asserts on close
  // requests the user still holds. A close that still has not finished is
  // released to UCX (which completes it while destroying the worker); its
  // rkeys are then leaked rather than freed under a live request.
  ~domain_state() {
    if (worker) {
      const auto deadline = std::chrono::steady_clock::now() + close_limit;
      for (reap_closing(); !closing.empty() && std::chrono::steady_clock::now() < deadline; reap_closing())
        ucp_worker_progress(worker);
      for (closing_endpoint& c : closing) {
        std::fprintf(stderr, "fabrix ucx: an endpoint close did not finish in %lld ms; releasing it to UCX\n",
                     static_cast<long long>(close_limit.count()));
        if (c.flush) ucp_request_free(c.flush);
        if (c.close) ucp_request_free(c.close);
      }
      ucp_worker_destroy(worker);
    }
    if (context) ucp_cleanup(context);
  }

  // How long a close may wait for a live peer (its flush) and for UCX.
  static constexpr std::chrono::milliseconds close_limit{2000};
};

struct peer_state {
  domain_state* dom = nullptr;
  std::uint32_t peer_id = 0;  // completion::peer of what arrives on this queue pair
  ucp_ep_h ep = nullptr;
  std::uint64_t send_tag = 0;              // our domain's nonce: tags our sends
  std::uint64_t recv_tag = 0;              // the peer domain's nonce: matches its sends, owns its regions
  fabrix::detail::seal_key peer_secret{};  // verifies the peer's remote_buffers
  bool failed = false;                     // set by UCX's error handler or by teardown
  bool detects_failure = true;             // UCP_ERR_HANDLING_MODE_PEER: UCX reports this peer's death
  bool same_node = false;                  // the peer process can be checked in /proc (liveness.hpp)
  process_identity identity;               // the peer process, for the liveness check
  ucs_status_t failure = UCS_OK;
  std::uint32_t imm_in_progress = 0;
  op_list parked_flushes;
  rkey_cache rkeys;  // unpacked once per remote region, bounded
};

}  // namespace fabrix::ucx::detail
