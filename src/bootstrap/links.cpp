// The peer-to-peer exchange of the TCP store (bootstrap_exchange::
// peer_to_peer): direct links between ranks, formed on the first collective,
// then Bruck's allgather and a dissemination barrier over them.
//
// Link k of rank r goes to rank (r - 2^k) mod N (r connects) and comes from
// rank (r + 2^k) mod N (r accepts), for k < ceil(log2 N): every rank holds
// 2 * ceil(log2 N) connections. Rank 0 only introduces: every rank's link
// address came down the tree when the job formed (tree.cpp).
//
// Forming: every rank connects to its targets and sends each a link hello
// (the kernel accepts into the listen backlog, so nobody waits for anybody
// to call accept), then one poll loop drives all the handshakes at once:
// accepting and challenging the sources, answering the targets' challenges,
// and the proofs and welcomes (wire.hpp). A connection to the link listener
// that is not the expected source of a round (a stray process, a forged
// hello) is closed and the wait goes on; one that fails authentication
// fails the job, since it claimed to be a rank of it.
//
// Allgather: in round k, rank r sends the first min(2^k, N - 2^k) blobs it
// holds (its own, then those of r + 1, r + 2, ...) to its target and
// receives as many from its source, sending and receiving at once (large
// blobs would otherwise fill both socket buffers and deadlock the ring).
// Every rank sends N - 1 blobs in all. A barrier is the same rounds with no
// blobs.
//
// Failures: any error breaks this rank (collective.cpp closes every socket);
// its link partners see the close and fail in turn, so the failure spreads
// to every rank waiting on it within the rounds, none waits for its timeout.
#include "state.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <optional>
#include <string>
#include <vector>

namespace fabrix::detail::boot {

namespace {

using blob_list = std::vector<std::vector<std::byte>>;

// ---- forming the links -------------------------------------------------------

struct outgoing_link {
  transcript t;
  frame_parser challenge{2, mac_bytes};
  frame_parser welcome{0, 0, /*with_mac=*/true};
  bool proved = false;  // the proof was sent; the welcome is awaited
  bool done = false;
};

struct link_former {
  bootstrap_state& st;
  listener& listen;
  std::uint64_t seq;
  int rounds;
  std::string me;
  std::vector<outgoing_link> out;
  std::vector<link_accept> pending;
  int formed_from = 0;

  link_former(bootstrap_state& s, listener& l, std::uint64_t q)
      : st(s), listen(l), seq(q), rounds(link_rounds(s.size)), me("rank " + std::to_string(s.rank)) {}

  std::string who(int rank, const std::string& address) const {
    return "rank " + std::to_string(rank) + " (" + address + ")";
  }
  unexpected broken(status code, const std::string& why) const {
    return fail(code, me + ": forming bootstrap links (collective #" + std::to_string(seq) + "): " + why);
  }

  result<void> connect_targets(deadline until) {
    out.resize(static_cast<std::size_t>(rounds));
    st.links_to.resize(static_cast<std::size_t>(rounds));
    st.links_from.resize(static_cast<std::size_t>(rounds));
    for (int k = 0; k < rounds; ++k) {
      auto& l = st.links_to[static_cast<std::size_t>(k)];
      l.peer = link_target(st.rank, st.size, k);
      l.address = st.link_addresses[static_cast<std::size_t>(l.peer)];
      auto where = parse_host_port(l.address, "link address");
      if (!where) return broken(status::provider_error, "the tree brought a bad address for " + who(l.peer, l.address));
      // The target's listener was open before it sent its address: a
      // refusal means it is gone (the job failed there), not that it is late.
      auto attempt = connect_once(*where, until);
      if (!attempt.fd)
        return broken(until.expired() ? status::timed_out : status::peer_unreachable,
                      "cannot connect to " + who(l.peer, l.address) + ": " + attempt.error +
                          " (it exited, or the job failed there)");
      l.fd = std::move(attempt.fd);
      set_nodelay(l.fd.get());
      auto& o = out[static_cast<std::size_t>(k)];
      o.t.size = static_cast<std::uint32_t>(st.size);
      o.t.rank = static_cast<std::uint32_t>(st.rank);
      o.t.link = true;
      o.t.acceptor = static_cast<std::uint32_t>(l.peer);
      o.t.round = static_cast<std::uint8_t>(k);
      if (!random_bytes(o.t.rank_nonce)) return broken(status::provider_error, "no random bytes for a nonce");
      const auto hello = encode_link_hello(st.token, o.t.size, o.t.rank, o.t.round, o.t.rank_nonce);
      const std::span<const std::byte> piece(hello);
      if (const auto io = send_all(l.fd.get(), std::span(&piece, 1), until); !io.ok())
        return broken(io_status_code(io),
                      "cannot send the link hello to " + who(l.peer, l.address) + ": " + describe(io));
    }
    return {};
  }

  // One target's challenge or welcome arrived (or its connection failed).
  result<void> step_outgoing(int k, deadline until) {
    auto& l = st.links_to[static_cast<std::size_t>(k)];
    auto& o = out[static_cast<std::size_t>(k)];
    frame_parser& p = o.proved ? o.welcome : o.challenge;
    const auto io = recv_available(l.fd.get(), p);
    if (!io.ok())
      return broken(io_status_code(io), who(l.peer, l.address) + " dropped its link from this rank: " + describe(io));
    if (!p.done()) return {};
    if (!o.proved) {
      proof_frame proof;
      switch (answer_challenge(st.token, o.t, p, proof, l.session)) {
        case challenge_check::ok: break;
        case challenge_check::not_a_challenge:
          return broken(status::provider_error, who(l.peer, l.address) + " answered the link hello with no challenge");
        case challenge_check::forged:
          return broken(status::access_denied, "the process at " + who(l.peer, l.address) +
                                                   " failed authentication: it does not know the job token");
      }
      const std::span<const std::byte> pieces[] = {proof.head, proof.length, proof.mac};
      if (const auto sent = send_all(l.fd.get(), pieces, until); !sent.ok())
        return broken(io_status_code(sent),
                      "cannot send the link proof to " + who(l.peer, l.address) + ": " + describe(sent));
      o.proved = true;
      return {};
    }
    if (!p.authentic(l.session) || p.header().kind != kind::welcome ||
        p.header().count != static_cast<std::uint32_t>(st.size))
      return broken(status::access_denied,
                    "the link welcome of " + who(l.peer, l.address) + " failed authentication or is not a welcome");
    o.done = true;
    return {};
  }

  // Whether a link hello is one this rank still waits for.
  bool expects(const hello& h) const {
    return h.round < rounds && h.rank == static_cast<std::uint32_t>(link_source(st.rank, st.size, h.round)) &&
           !st.links_from[h.round].fd;
  }

  // A connection to the link listener made progress. Strays (see
  // step_link_accept) are closed; only a failed authentication fails the job.
  result<void> step_incoming(link_accept& c, deadline until) {
    const accept_step step = step_link_accept(
        st, c, [&](const hello& h) { return expects(h); }, until);
    if (step == accept_step::forged)
      return broken(status::access_denied, "a connection from " + peer_name(c.fd.get()) + " claiming to be rank " +
                                               std::to_string(c.t.rank) +
                                               " failed authentication on this rank's link listener");
    if (step != accept_step::proved) return {};
    return adopt(c, until);
  }

  // A proved link from a source: welcome it and keep it.
  result<void> adopt(link_accept& c, deadline until) {
    auto& l = st.links_from[c.t.round];
    if (l.fd) {  // a second one for that round: not ours to keep
      c.fd.reset();
      return {};
    }
    const int source = static_cast<int>(c.t.rank);
    l.peer = source;
    l.address = peer_name(c.fd.get());
    l.session.key = session_key(st.token, c.t);
    l.session.outgoing = direction::root_to_rank;
    const auto welcome = encode_frame_header({kind::welcome, op::none, 0, 0, static_cast<std::uint32_t>(st.size)});
    const digest mac = l.session.seal(welcome, payload_digest({}));
    const std::span<const std::byte> pieces[] = {welcome, mac};
    if (const auto sent = send_all(c.fd.get(), pieces, until); !sent.ok())
      return broken(io_status_code(sent), "cannot welcome " + who(source, l.address) + ": " + describe(sent));
    l.fd = std::move(c.fd);
    ++formed_from;
    return {};
  }

  // Link handshakes the listener took while it waited for the tree.
  result<void> take_early(std::vector<link_accept>& early, deadline until) {
    for (auto& c : early) {
      if (!c.fd) continue;
      if (c.proved) {
        if (auto r = adopt(c, until); !r) return r;
      } else {
        c.since = clock::now();
        pending.push_back(std::move(c));
      }
    }
    early.clear();
    return {};
  }

  // A link that already formed carries nothing until the first round: the
  // target of an outgoing link never sends on it, and a source's first frame
  // follows its own forming, with its end still open. Either one closing (its
  // rank failed on another link, or died) fails this rank now: it may be
  // waiting for a source that will never come, and nobody else will tell it.
  result<void> check_formed(int k, bool outgoing) {
    const auto& l = outgoing ? st.links_to[static_cast<std::size_t>(k)] : st.links_from[static_cast<std::size_t>(k)];
    std::byte b{};
    const ssize_t n = outgoing ? ::recv(l.fd.get(), &b, 1, MSG_PEEK | MSG_DONTWAIT) : 0;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return {};
    if (n > 0)
      return broken(status::provider_error, who(l.peer, l.address) + " sent data on a link it only receives on");
    // A partner that timed out waiting for the same missing rank closes
    // too: the links still missing here name the rank the job waits for.
    const std::string why = n == 0 ? "closed its link" : "broke its link (" + errno_text(errno) + ")";
    return broken(
        status::peer_unreachable,
        who(l.peer, l.address) + " " + why +
            " before every link of this rank formed (it exited, or the job failed there); links missing:" + missing());
  }

  // The links not formed yet, as " to rank 1 (address); from rank 3;".
  std::string missing() const {
    std::string text;
    for (int k = 0; k < rounds; ++k) {
      const auto& l = st.links_to[static_cast<std::size_t>(k)];
      if (!out[static_cast<std::size_t>(k)].done) text += " to " + who(l.peer, l.address) + ";";
      if (!st.links_from[static_cast<std::size_t>(k)].fd)
        text += " from rank " + std::to_string(link_source(st.rank, st.size, k)) + ";";
    }
    return text;
  }

  result<void> run(deadline until) {
    std::vector<pollfd> fds;
    // -1: listener; k >= 0: outgoing link k; -2 - i: pending[i];
    // -2 - pending.size() - k: the formed incoming link of round k
    std::vector<int> what;
    for (;;) {
      const bool all_out = std::all_of(out.begin(), out.end(), [](const outgoing_link& o) { return o.done; });
      if (all_out && formed_from == rounds) return {};
      expire_pending(pending);
      fds.clear();
      what.clear();
      if (formed_from < rounds) {
        fds.push_back({listen.fd.get(), POLLIN, 0});
        what.push_back(-1);
      }
      for (int k = 0; k < rounds; ++k) {
        fds.push_back({st.links_to[static_cast<std::size_t>(k)].fd.get(), POLLIN, 0});
        what.push_back(k);
      }
      const int formed_base = -2 - static_cast<int>(pending.size());
      for (std::size_t i = 0; i < pending.size(); ++i) {
        fds.push_back({pending[i].fd.get(), POLLIN, 0});
        what.push_back(-2 - static_cast<int>(i));
      }
      for (int k = 0; k < rounds; ++k) {
        const auto& from = st.links_from[static_cast<std::size_t>(k)];
        if (!from.fd) continue;
        fds.push_back({from.fd.get(), POLLRDHUP, 0});  // not POLLIN: its first frame may come early
        what.push_back(formed_base - k);
      }
      const int ready = poll_until(fds.data(), fds.size(), until.capped(pending_accept_limit));
      if (ready < 0 && errno != EINTR) return broken(status::provider_error, "poll() failed: " + errno_text(errno));
      if (ready <= 0) {
        if (!until.expired()) continue;
        return broken(status::timed_out, "timed out after " + std::to_string(st.opts.op_timeout.count()) +
                                             " ms; links missing:" + missing());
      }
      for (std::size_t i = 0; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        if (what[i] == -1) {
          accept_pending(listen.fd.get(), pending);
        } else if (what[i] >= 0) {
          const int k = what[i];
          auto r = out[static_cast<std::size_t>(k)].done ? check_formed(k, true) : step_outgoing(k, until);
          if (!r) return r;
        } else if (what[i] > formed_base) {
          auto& c = pending[static_cast<std::size_t>(-2 - what[i])];
          if (auto r = step_incoming(c, until); !r) return r;
        } else {
          if (auto r = check_formed(formed_base - what[i], false); !r) return r;
        }
      }
    }
  }
};

result<void> form_links(bootstrap_state& st, std::uint64_t seq, deadline until) {
  if (!st.link_listener || st.link_addresses.size() != static_cast<std::size_t>(st.size))
    return fail(status::provider_error,
                "rank " + std::to_string(st.rank) + ": no link addresses (the job did not form peer to peer)");
  link_former former(st, *st.link_listener, seq);
  if (auto r = former.connect_targets(until); !r) return r;
  if (auto r = former.take_early(st.early_links, until); !r) return r;
  if (auto r = former.run(until); !r) return r;
  st.link_listener.reset();  // every link has formed: nobody connects any more
  st.links_formed = true;
  return {};
}

// ---- one collective over the links ----------------------------------------------

std::string link_who(const bootstrap_state::link& l) {
  return "rank " + std::to_string(l.peer) + " (" + l.address + ")";
}

}  // namespace

accept_step step_link_accept(const bootstrap_state& st, link_accept& c,
                             const std::function<bool(const hello&)>& expected, deadline until) {
  if (!c.challenged) {
    for (;;) {
      const ssize_t n = ::recv(c.fd.get(), c.buf.data() + c.filled, c.buf.size() - c.filled, MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return accept_step::under_way;
      if (n <= 0) {
        c.fd.reset();
        return accept_step::closed;
      }
      c.filled += static_cast<std::size_t>(n);
      if (c.filled == hello_bytes) break;
    }
    const hello h = decode_hello(c.buf);
    if (h.magic != wire_magic || h.kind != static_cast<std::uint8_t>(kind::link_hello) || h.version != wire_version ||
        h.size != static_cast<std::uint32_t>(st.size) || !expected(h) || !hello_vouched(st.token, c.buf)) {
      c.fd.reset();
      return accept_step::closed;
    }
    c.t.size = h.size;
    c.t.rank = h.rank;
    c.t.rank_nonce = h.rank_nonce;
    c.t.link = true;
    c.t.acceptor = static_cast<std::uint32_t>(st.rank);
    c.t.round = h.round;
    if (!random_bytes(c.t.root_nonce)) {
      c.fd.reset();
      return accept_step::closed;
    }
    const digest mac = challenge_mac(st.token, c.t);
    const auto head = encode_frame_header({kind::challenge, op::none, 0, 0, 2});
    const auto nlen = encode_length(nonce_bytes);
    const auto mlen = encode_length(mac_bytes);
    const std::span<const std::byte> pieces[] = {head, nlen, c.t.root_nonce, mlen, mac};
    if (!send_all(c.fd.get(), pieces, until.capped(std::chrono::milliseconds(100))).ok()) {
      c.fd.reset();
      return accept_step::closed;
    }
    c.challenged = true;
    c.proof.emplace(1u, mac_bytes);
  }
  const auto io = recv_available(c.fd.get(), *c.proof);
  if (!io.ok()) {
    c.fd.reset();
    return accept_step::closed;
  }
  if (!c.proof->done()) return accept_step::under_way;
  const auto& h = c.proof->header();
  c.proved = h.kind == kind::proof && h.count == 1 && c.proof->blobs()[0].size() == mac_bytes &&
             digests_equal(proof_mac(st.token, c.t),
                           std::span<const std::byte, mac_bytes>(c.proof->blobs()[0].data(), mac_bytes));
  return c.proved ? accept_step::proved : accept_step::forged;
}

void expire_pending(std::vector<link_accept>& pending) {
  const auto now = clock::now();
  std::erase_if(pending, [now](const link_accept& c) { return !c.fd || now - c.since > pending_accept_limit; });
}

void accept_pending(int listen_fd, std::vector<link_accept>& pending) {
  for (;;) {
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    unique_fd accepted(fd);
    if (pending.size() >= max_pending_accepts) continue;  // closed unanswered
    set_nodelay(fd);
    link_accept c;
    c.fd = std::move(accepted);
    pending.push_back(std::move(c));
  }
}

void retire(bootstrap_state& st, unique_fd& fd) noexcept {
  if (!fd) return;
  const auto t = socket_traffic(fd.get());
  st.closed_traffic.bytes_sent += t.bytes_sent;
  st.closed_traffic.bytes_received += t.bytes_received;
  fd.reset();
}

result<blob_list> run_over_links(bootstrap_state& st, op kind_, std::uint64_t seq, std::span<const std::byte> mine,
                                 deadline until) {
  if (!st.links_formed) {
    if (auto r = form_links(st, seq, until); !r) return unexpected(r.error());
  }
  const std::string me = "rank " + std::to_string(st.rank);
  const bool blobs = kind_ == op::allgather;
  const int n = st.size;
  const int rounds = link_rounds(n);
  blob_list held;  // held[i]: the blob of rank (rank + i) mod n
  if (blobs) {
    held.reserve(static_cast<std::size_t>(n));
    held.emplace_back(mine.begin(), mine.end());
  }
  for (int k = 0; k < rounds; ++k) {
    auto& to = st.links_to[static_cast<std::size_t>(k)];
    auto& from = st.links_from[static_cast<std::size_t>(k)];
    const int step = 1 << k;
    const auto count = static_cast<std::uint32_t>(blobs ? std::min(step, n - step) : 0);
    // The frame to the target: the first `count` blobs held.
    const auto h = encode_frame_header({kind::contribute, kind_, static_cast<std::uint16_t>(k), seq, count});
    std::vector<std::array<std::byte, length_bytes>> lens(count);
    std::vector<std::span<const std::byte>> pieces{h};
    payload_hash ph;
    for (std::uint32_t i = 0; i < count; ++i) {
      lens[i] = encode_length(held[i].size());
      pieces.emplace_back(lens[i]);
      pieces.emplace_back(held[i]);
      ph.add(held[i]);
    }
    const digest mac = to.session.seal(h, ph.finish());
    pieces.emplace_back(mac);
    partial_send sender(pieces);
    frame_parser incoming(std::max<std::uint32_t>(count, 1), max_blob_bytes, /*with_mac=*/true);
    const std::string where = " during " + op_text(kind_, seq) + " (link round " + std::to_string(k) + ")";
    for (;;) {
      if (!sender.done()) {
        const auto io = sender.pump(to.fd.get());
        if (!io.ok())
          return fail(io_status_code(io), me + ": cannot send to " + link_who(to) + where + ": " + describe(io) +
                                              " (it exited, or the job failed there)");
      }
      if (!incoming.done()) {
        const auto io = recv_available(from.fd.get(), incoming);
        if (!io.ok()) {
          const std::string why = io.status == io_status::closed
                                      ? "closed its bootstrap link (it exited, or the job failed there)"
                                      : describe(io);
          return fail(io_status_code(io), me + ": " + link_who(from) + " " + why + where);
        }
      }
      if (sender.done() && incoming.done()) break;
      pollfd fds[2];
      std::size_t nfds = 0;
      if (!sender.done()) fds[nfds++] = {to.fd.get(), POLLOUT, 0};
      if (!incoming.done()) fds[nfds++] = {from.fd.get(), POLLIN, 0};
      const int ready = poll_until(fds, nfds, until);
      if (ready < 0 && errno != EINTR)
        return fail(status::provider_error, me + ": poll() failed" + where + ": " + errno_text(errno));
      if (ready == 0 && until.expired())
        return fail(status::timed_out, me + ": " + op_text(kind_, seq) + " timed out after " +
                                           std::to_string(st.opts.op_timeout.count()) + " ms waiting for " +
                                           link_who(incoming.done() ? to : from) + where +
                                           " (a rank missing, slow, or stuck in another call?)");
    }
    if (!incoming.authentic(from.session))
      return fail(status::access_denied,
                  me + ": a frame from " + link_who(from) + where + " failed authentication (forged or altered)");
    const auto& got = incoming.header();
    if (got.kind != kind::contribute || got.aux != k)
      return fail(status::provider_error, me + ": " + link_who(from) + " sent an unexpected frame" + where);
    if (got.op != kind_ || got.seq != seq)
      return fail(status::invalid_argument, "collective mismatch: " + link_who(from) + " called " +
                                                op_text(got.op, got.seq) + " while " + me + " called " +
                                                op_text(kind_, seq));
    if (got.count != count)
      return fail(status::provider_error, me + ": " + link_who(from) + " sent " + std::to_string(got.count) +
                                              " blobs, expected " + std::to_string(count) + where);
    for (auto& b : incoming.blobs()) held.push_back(std::move(b));
  }
  blob_list all(blobs ? static_cast<std::size_t>(n) : 0);
  for (std::size_t i = 0; i < all.size(); ++i)
    all[(static_cast<std::size_t>(st.rank) + i) % all.size()] = std::move(held[i]);
  return all;
}

}  // namespace fabrix::detail::boot
