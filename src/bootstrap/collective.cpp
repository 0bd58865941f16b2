// allgather and barrier. Rank 0 reads every peer's contribution (all peers
// at once, with poll), then sends each peer the full set; a peer sends its
// contribution and reads the full set. Any failure breaks the job: rank 0
// tells the peers it can still reach (an abort frame), then every socket is
// closed, so no rank waits for its timeout when another already knows.
#include "state.hpp"

#include <poll.h>

#include <cerrno>
#include <string>
#include <vector>

namespace fabrix::detail::boot {

namespace {

using blob_list = std::vector<std::vector<std::byte>>;

std::uint32_t contribution_count(op o) { return o == op::barrier ? 0u : 1u; }

// ---- rank 0 ------------------------------------------------------------

struct root_round {
  bootstrap_state& st;
  op kind_;
  std::uint64_t seq;
  // Peers whose outgoing stream is at a frame boundary (an abort can follow).
  std::vector<bool> clean;

  std::string rank_text(std::size_t r) const { return "rank " + std::to_string(r) + " (" + st.peer_addresses[r] + ")"; }

  // Tells every reachable peer why the job failed, then closes everything.
  unexpected abort_job(status code, std::string message) {
    std::string text = message.substr(0, max_message_bytes);
    const auto text_bytes = std::as_bytes(std::span<const char>(text.data(), text.size()));
    const auto h = encode_frame_header({kind::abort, kind_, static_cast<std::uint16_t>(code), seq, 1});
    const auto len = encode_length(text.size());
    payload_hash ph;
    ph.add(text_bytes);
    const digest payload = ph.finish();
    // Bounded, and without the caller's progress callback: the job is over.
    const deadline until = deadline::after(std::chrono::milliseconds(200));
    for (std::size_t r = 1; r < st.peers.size(); ++r) {
      if (!st.peers[r] || !clean[r]) continue;
      const digest mac = st.peer_sessions[r].seal(h, payload);
      const std::span<const std::byte> pieces[] = {h, len, text_bytes, mac};
      (void)send_all(st.peers[r].get(), pieces, until);
    }
    for (auto& p : st.peers) p.reset();
    return fail(code, std::move(message));
  }

  result<blob_list> gather(std::span<const std::byte> mine, deadline until) {
    const std::size_t n = st.peers.size();
    blob_list all(n);
    std::vector<frame_parser> parsers;
    parsers.reserve(n);
    for (std::size_t r = 0; r < n; ++r) parsers.emplace_back(1u, max_blob_bytes, /*with_mac=*/true);
    std::vector<bool> received(n, false);
    received[0] = true;
    std::size_t missing = n - 1;
    std::vector<pollfd> fds;
    std::vector<std::size_t> ranks;
    while (missing > 0) {
      fds.clear();
      ranks.clear();
      for (std::size_t r = 1; r < n; ++r) {
        if (received[r]) continue;
        fds.push_back({st.peers[r].get(), POLLIN, 0});
        ranks.push_back(r);
      }
      const int ready = poll_until(fds.data(), fds.size(), until);
      if (ready < 0 && errno != EINTR)
        return abort_job(status::provider_error,
                         "rank 0: poll() failed in " + op_text(kind_, seq) + ": " + errno_text(errno));
      if (ready == 0 && until.expired()) {
        std::string who;
        for (std::size_t r : ranks) who += (who.empty() ? "" : ", ") + rank_text(r);
        return abort_job(status::timed_out, "rank 0: " + op_text(kind_, seq) + " timed out after " +
                                                std::to_string(st.opts.op_timeout.count()) + " ms waiting for " + who +
                                                " (root " + st.root_address + ")");
      }
      for (std::size_t k = 0; k < fds.size(); ++k) {
        if (fds[k].revents == 0) continue;
        const std::size_t r = ranks[k];
        auto& p = parsers[r];
        const auto io = recv_available(st.peers[r].get(), p);
        if (!io.ok()) {
          const std::string why = io.status == io_status::closed
                                      ? "closed its bootstrap connection (process exited or was killed?)"
                                      : describe(io);
          return abort_job(io_status_code(io),
                           "rank 0: " + rank_text(r) + " " + why + " during " + op_text(kind_, seq));
        }
        if (!p.done()) continue;
        if (!p.authentic(st.peer_sessions[r]))
          return abort_job(status::access_denied, "rank 0: a frame from " + rank_text(r) + " during " +
                                                      op_text(kind_, seq) +
                                                      " failed authentication (forged or altered in transit)");
        const auto& h = p.header();
        if (h.kind != kind::contribute)
          return abort_job(status::provider_error,
                           "rank 0: " + rank_text(r) + " sent an unexpected frame during " + op_text(kind_, seq));
        if (h.op != kind_ || h.seq != seq)
          return abort_job(status::invalid_argument, "collective mismatch: " + rank_text(r) + " called " +
                                                         op_text(h.op, h.seq) + " while rank 0 called " +
                                                         op_text(kind_, seq));
        if (h.count != contribution_count(kind_))
          return abort_job(status::provider_error, "rank 0: " + rank_text(r) + " sent " + std::to_string(h.count) +
                                                       " blobs in " + op_text(kind_, seq));
        if (kind_ != op::barrier) all[r] = std::move(p.blobs().front());
        received[r] = true;
        --missing;
      }
    }
    if (kind_ != op::barrier) all[0].assign(mine.begin(), mine.end());
    return all;
  }

  result<void> scatter(const blob_list& all, deadline until) {
    const std::size_t n = st.peers.size();
    const bool with_blobs = kind_ == op::allgather;
    const auto h = encode_frame_header({kind::result, kind_, 0, seq, with_blobs ? static_cast<std::uint32_t>(n) : 0u});
    std::vector<std::array<std::byte, length_bytes>> lens;
    std::vector<std::span<const std::byte>> pieces{h};
    if (with_blobs) {
      lens.reserve(n);
      for (const auto& b : all) {
        lens.push_back(encode_length(b.size()));
        pieces.emplace_back(lens.back());
        pieces.emplace_back(b);
      }
    }
    // The payload is hashed once; each peer's trailer binds that hash to its session.
    const digest payload = with_blobs ? payload_digest(all) : payload_digest({});
    digest mac{};
    pieces.emplace_back(mac);
    for (std::size_t r = 1; r < n; ++r) {
      clean[r] = false;
      mac = st.peer_sessions[r].seal(h, payload);
      const auto io = send_all(st.peers[r].get(), pieces, until);
      if (!io.ok())
        return abort_job(io_status_code(io), "rank 0: cannot send the " + op_text(kind_, seq) + " result to " +
                                                 rank_text(r) + ": " + describe(io));
      clean[r] = true;
    }
    return {};
  }
};

// ---- ranks > 0 -----------------------------------------------------------

status status_from_wire(std::uint16_t aux) {
  const auto s = static_cast<status>(aux);
  return aux <= static_cast<std::uint16_t>(status::provider_error) && is_error(s) ? s : status::provider_error;
}

// `expected`: how many blobs the result must carry.
result<blob_list> peer_round(bootstrap_state& st, op kind_, std::uint64_t seq, std::span<const std::byte> mine,
                             std::uint32_t expected, deadline until) {
  const std::string me = "rank " + std::to_string(st.rank);
  const auto h = encode_frame_header({kind::contribute, kind_, 0, seq, contribution_count(kind_)});
  const auto len = encode_length(mine.size());
  payload_hash ph;
  if (kind_ != op::barrier) ph.add(mine);
  const digest mac = st.root_session.seal(h, ph.finish());
  std::vector<std::span<const std::byte>> pieces{h};
  if (kind_ != op::barrier) {
    pieces.emplace_back(len);
    pieces.emplace_back(mine);
  }
  pieces.emplace_back(mac);
  const auto sent = send_all(st.root.get(), pieces, until);
  // Even when the send failed, rank 0 may have explained why before closing.
  frame_parser answer(std::max<std::uint32_t>(expected, 1), max_blob_bytes, /*with_mac=*/true);
  const auto io = recv_frame(st.root.get(), answer, sent.ok() ? until : until.capped(std::chrono::milliseconds(100)));
  if (io.ok() && !answer.authentic(st.root_session))
    return fail(status::access_denied, me + ": a frame from bootstrap root " + st.root_address + " during " +
                                           op_text(kind_, seq) +
                                           " failed authentication (forged or altered in transit: is something "
                                           "between this rank and rank 0?); refused");
  if (io.ok() && answer.header().kind == kind::abort) {
    std::string why;
    if (!answer.blobs().empty()) {
      const auto& b = answer.blobs().front();
      why.assign(reinterpret_cast<const char*>(b.data()), std::min(b.size(), max_message_bytes));
    }
    return fail(status_from_wire(answer.header().aux), me + ": the job failed in " + op_text(kind_, seq) +
                                                           ", bootstrap root " + st.root_address + " says: " + why);
  }
  if (!sent.ok())
    return fail(io_status_code(sent), me + ": cannot send " + op_text(kind_, seq) + " to bootstrap root " +
                                          st.root_address + ": " + describe(sent));
  if (!io.ok()) {
    if (io.status == io_status::timed_out)
      return fail(status::timed_out,
                  me + ": " + op_text(kind_, seq) + " timed out after " + std::to_string(st.opts.op_timeout.count()) +
                      " ms waiting for bootstrap root " + st.root_address + " (another rank missing or slow?)");
    return fail(io_status_code(io), me + ": lost bootstrap root " + st.root_address + " during " + op_text(kind_, seq) +
                                        ": " + describe(io));
  }
  const auto& a = answer.header();
  if (a.kind != kind::result || a.op != kind_ || a.seq != seq || a.count != expected)
    return fail(status::provider_error, me + ": bootstrap root " + st.root_address + " answered " +
                                            op_text(kind_, seq) + " with " + op_text(a.op, a.seq) +
                                            " (protocol error)");
  return std::move(answer.blobs());
}

}  // namespace

int link_rounds(int size) noexcept {
  int rounds = 0;
  while ((1LL << rounds) < size) ++rounds;
  return rounds;
}
int link_target(int rank, int size, int round) noexcept {
  const long long step = (1LL << round) % size;
  return static_cast<int>((rank - step + size) % size);
}
int link_source(int rank, int size, int round) noexcept {
  const long long step = (1LL << round) % size;
  return static_cast<int>((rank + step) % size);
}

result<blob_list> run_introduce(bootstrap_state& st, std::span<const std::byte> mine, deadline until) {
  if (st.rank != 0) {
    auto go = peer_round(st, op::introduce, 0, mine, 0, until);
    if (!go) return unexpected(go.error());
    return blob_list{};
  }
  root_round round{st, op::introduce, 0, std::vector<bool>(st.peers.size(), true)};
  auto all = round.gather(mine, until);
  if (!all) return unexpected(all.error());
  for (std::size_t r = 1; r < all->size(); ++r) {
    const auto& a = (*all)[r];
    const std::string text(reinterpret_cast<const char*>(a.data()), std::min(a.size(), max_address_bytes));
    if (a.size() > max_address_bytes || !parse_host_port(text, "link address"))
      return round.abort_job(status::provider_error, "rank 0: " + round.rank_text(r) + " sent a bad link address");
  }
  if (auto sent = round.scatter({}, until); !sent) return unexpected(sent.error());
  return all;
}

result<blob_list> run_collective(bootstrap_state& st, op kind_, std::span<const std::byte> mine,
                                 const std::function<void()>* progress) {
  if (st.in_call)  // the object stays usable: the outer call goes on
    return fail(status::invalid_argument, "rank " + std::to_string(st.rank) + ": bootstrap " +
                                              std::string(to_string(kind_)) +
                                              " called from inside a bootstrap call (its progress callback?)");
  if (st.broken) return unexpected(*st.broken);
  struct in_call_guard {
    bool& flag;
    explicit in_call_guard(bool& f) : flag(f) { flag = true; }
    ~in_call_guard() { flag = false; }
    in_call_guard(const in_call_guard&) = delete;
    in_call_guard& operator=(const in_call_guard&) = delete;
  } guard(st.in_call);
  progress_hook hook = hook_of(st.opts, progress);
  const std::uint64_t seq = ++st.seq;
  const std::string me = "rank " + std::to_string(st.rank);

  result<blob_list> out = blob_list{};
  if (mine.size() > max_blob_bytes) {
    out = fail(status::invalid_argument, me + ": allgather blob of " + std::to_string(mine.size()) +
                                             " bytes is over the limit of " + std::to_string(max_blob_bytes));
  } else if (st.size == 1) {
    if (kind_ == op::allgather) out = blob_list{std::vector<std::byte>(mine.begin(), mine.end())};
    return out;
  }

  const deadline until = deadline::after(st.opts.op_timeout, &hook);
  if (out && st.exchange == exchange_peer_to_peer) {
    out = run_over_links(st, kind_, seq, mine, until);
  } else if (st.rank == 0) {
    root_round round{st, kind_, seq, std::vector<bool>(st.peers.size(), true)};
    if (!out) {
      (void)round.abort_job(out.code(), out.error().message);
    } else {
      out = round.gather(mine, until);
      if (out) {
        if (auto sent = round.scatter(*out, until); !sent) out = unexpected(sent.error());
      }
    }
  } else if (out) {
    out = peer_round(st, kind_, seq, mine, kind_ == op::allgather ? static_cast<std::uint32_t>(st.size) : 0u, until);
  }
  if (!out) {
    st.broken = out.error();
    for (auto& p : st.peers) p.reset();
    st.root.reset();
    for (auto& l : st.links_to) l.fd.reset();
    for (auto& l : st.links_from) l.fd.reset();
  }
  return out;
}

}  // namespace fabrix::detail::boot
