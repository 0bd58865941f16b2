// What a bootstrap and a bootstrap_root hold (internal), and the entry points
// the .cpp files of src/bootstrap implement for each other.
#pragma once

#include "socket.hpp"

#include <fabrix/bootstrap.hpp>

#include <array>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace fabrix::detail::boot {

// links.cpp: the accepting side of a link handshake (links and the tree).
struct link_accept {
  unique_fd fd;
  clock::time_point since = clock::now();
  std::array<std::byte, hello_bytes> buf{};
  std::size_t filled = 0;
  bool challenged = false;
  transcript t;
  std::optional<frame_parser> proof;
  bool proved = false;  // step_link_accept said `proved`
};

}  // namespace fabrix::detail::boot

namespace fabrix::detail {

struct bootstrap_state {
  int rank = 0;
  int size = 1;
  bootstrap_options opts;
  std::string root_address;                      // rank 0's address, for messages
  std::vector<boot::unique_fd> peers;            // rank 0: [r] is the connection to rank r ([0] unused)
  std::vector<std::string> peer_addresses;       // rank 0: [r] is rank r's address as seen by rank 0
  std::vector<boot::session> peer_sessions;      // rank 0: [r] authenticates the frames to and from rank r
  boot::unique_fd root;                          // rank > 0: the connection to rank 0
  boot::session root_session;                    // rank > 0: authenticates the frames to and from rank 0
  std::string token;                             // the job token (links authenticate with it too)
  std::uint16_t exchange = boot::exchange_star;  // what rank 0's welcome said (wire.hpp)
  // peer_to_peer, once formed (links.cpp): [k] is the link of round k, to
  // rank (rank - 2^k) mod size and from rank (rank + 2^k) mod size.
  struct link {
    int peer = -1;
    std::string address;  // the peer's, for messages
    boot::unique_fd fd;
    boot::session session;
  };
  std::vector<link> links_to, links_from;
  bool links_formed = false;
  // peer_to_peer: this rank's link listener and every rank's link address
  // ([r] for rank r), from the tree (tree.cpp); the listener closes once the
  // links have formed.
  std::optional<boot::listener> link_listener;
  std::vector<std::string> link_addresses;
  // Link handshakes that reached the listener while it waited for the tree
  // (their ranks had the table first); form_links takes them over.
  std::vector<boot::link_accept> early_links;
  // What connections closed so far carried (the star after the tree, the
  // tree's own): traffic() adds it.
  bootstrap_traffic closed_traffic;
  bool in_call = false;                 // a collective is running (its progress callback may not re-enter)
  std::uint64_t seq = 0;                // collectives started so far
  std::optional<fabrix::error> broken;  // set by the first error; the object is then unusable
};

// The TCP store as a bootstrap_engine (bootstrap.cpp).
class tcp_store_engine final : public bootstrap_engine {
 public:
  explicit tcp_store_engine(std::unique_ptr<bootstrap_state> state) noexcept : st_(std::move(state)) {}
  int rank() const noexcept override { return st_->rank; }
  int size() const noexcept override { return st_->size; }
  std::string describe() const override;
  std::optional<bootstrap_traffic> traffic() const override;
  result<std::vector<std::vector<std::byte>>> allgather(std::span<const std::byte> mine,
                                                        const std::function<void()>* progress) override;
  result<void> barrier(const std::function<void()>* progress) override;
  const std::function<void()>* default_progress() const noexcept override { return &st_->opts.progress; }

 private:
  std::unique_ptr<bootstrap_state> st_;
};

struct bootstrap_root_state {
  int size = 1;
  std::string token;
  bootstrap_options opts;
  boot::listener listen;
  std::string address;  // listen.host:listen.port, formatted
};

struct bootstrap_access {
  static bootstrap make(std::unique_ptr<bootstrap_state> s) {
    return bootstrap(std::make_unique<tcp_store_engine>(std::move(s)));
  }
  static bootstrap_root make_root(std::unique_ptr<bootstrap_root_state> s) noexcept {
    return bootstrap_root(std::move(s));
  }
  static bootstrap_root_state* state(bootstrap_root& r) noexcept { return r.state_.get(); }
};

}  // namespace fabrix::detail

namespace fabrix::detail::boot {

// The hook that runs opts.progress while a wait lasts.
inline progress_hook hook_of(const bootstrap_options& opts, const std::function<void()>* fn) {
  progress_hook h;
  h.fn = fn;
  h.every = opts.progress_interval;
  return h;
}

// root.cpp: rank 0 listens, then assembles the job before `until`.
result<bootstrap_root> listen_root(int size, std::string_view bind_address, std::string_view token,
                                   const bootstrap_options& opts, deadline until);
result<bootstrap> accept_peers(bootstrap_root_state& root, deadline until);

// peer.cpp: a rank > 0 joins the job hosted at `root_address`.
result<bootstrap> join_root(int rank, int size, std::string_view root_address, std::string_view token,
                            const bootstrap_options& opts, progress_hook* hook);

// collective.cpp: one allgather or barrier (barrier returns no blobs), with
// `progress` run while it waits (null: none).
result<std::vector<std::vector<std::byte>>> run_collective(bootstrap_state& st, op kind,
                                                           std::span<const std::byte> mine,
                                                           const std::function<void()>* progress);

// links.cpp (peer_to_peer): forms the links on the first call (an
// introduce round through rank 0, then the link handshakes), then runs one
// allgather (Bruck) or barrier (dissemination) over them.
result<std::vector<std::vector<std::byte>>> run_over_links(bootstrap_state& st, op kind, std::uint64_t seq,
                                                           std::span<const std::byte> mine, deadline until);
// collective.cpp: the introduce round through rank 0 (wire.hpp). `mine` is
// this rank's link address; rank 0 gets every rank's, the others nothing.
result<std::vector<std::vector<std::byte>>> run_introduce(bootstrap_state& st, std::span<const std::byte> mine,
                                                          deadline until);

// tree.cpp (peer_to_peer, right after the welcome): the introduce round,
// then the star closes and the table of link addresses comes down the
// binomial tree; fills link_listener and link_addresses.
result<void> spread_link_addresses(bootstrap_state& st, deadline until);

enum class accept_step { under_way, closed, proved, forged };
// Moves `c` on with what arrived. A hello for which `expected` says no (a
// stray, or one whose hello_mac was not made with the job's token) closes
// `c` (fd reset, `closed`); `proved`: the proof verified, `c.t` is the
// transcript; `forged`: an expected hello was followed by a wrong proof.
accept_step step_link_accept(const bootstrap_state& st, link_accept& c,
                             const std::function<bool(const hello&)>& expected, deadline until);
// Connections accepted on a link listener whose handshake has not ended
// (links and the tree): at most max_pending_accepts (more are closed
// unanswered: a flood pays, not the job), each closed unanswered after
// pending_accept_limit.
inline constexpr std::size_t max_pending_accepts = 64;
inline constexpr std::chrono::milliseconds pending_accept_limit{2000};
// Closes and drops the pending connections older than pending_accept_limit.
void expire_pending(std::vector<link_accept>& pending);
// Accepts every connection waiting on `listen_fd` into `pending` (non-blocking).
void accept_pending(int listen_fd, std::vector<link_accept>& pending);
// Closes `fd`, adding what it carried to st.closed_traffic.
void retire(bootstrap_state& st, unique_fd& fd) noexcept;
// Round count and partners of the peer-to-peer exchange.
int link_rounds(int size) noexcept;
int link_target(int rank, int size, int round) noexcept;  // (rank - 2^round) mod size
int link_source(int rank, int size, int round) noexcept;  // (rank + 2^round) mod size

// A job of one rank: no sockets.
std::unique_ptr<bootstrap_state> solo_state(const bootstrap_options& opts);

inline unexpected fail(status code, std::string message) { return unexpected(code, std::move(message), "bootstrap"); }

// "allgather #3", for messages.
inline std::string op_text(op o, std::uint64_t seq) { return std::string(to_string(o)) + " #" + std::to_string(seq); }

// The status a failed socket operation gives the collective.
inline status io_status_code(const io_result& io) {
  switch (io.status) {
    case io_status::timed_out: return status::timed_out;
    case io_status::malformed: return status::provider_error;
    default: return status::peer_unreachable;
  }
}

}  // namespace fabrix::detail::boot
