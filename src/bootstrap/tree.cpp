// How a peer-to-peer job learns every rank's link address (wire.hpp):
// right after the welcome, each rank sends rank 0 its link listener's
// address (the introduce round, the star's last use); rank 0 answers "go"
// and closes its connection to every rank, then the table of addresses
// travels down a binomial tree rooted at rank 0, each rank passing it to its
// children over a link handshake. Rank 0 thus admits every rank once and
// holds no connection per rank afterwards; no rank sends the table more
// than ceil(log2 N) times.
//
// Failures: a rank that cannot pass the table to a child fails its
// create() naming the child; the child's subtree waits for its parent
// until connect_timeout and then fails naming that parent. A connection to
// the listener that is not the parent's tree handshake (a stray) is closed
// and the wait goes on; one that claims to be the parent and fails
// authentication fails the job. Link handshakes that arrive meanwhile (from
// ranks that had the table first) are kept for the links (links.cpp).
#include "state.hpp"

#include <poll.h>

#include <cerrno>
#include <string>
#include <vector>

namespace fabrix::detail::boot {

namespace {

using blob_list = std::vector<std::vector<std::byte>>;

// The highest k with 2^k <= r (r > 0).
int top_bit(int r) noexcept {
  int k = 0;
  while ((2LL << k) <= r) ++k;
  return k;
}
int tree_parent(int r) noexcept { return r - (1 << top_bit(r)); }
std::vector<int> tree_children(int r, int size) {
  std::vector<int> out;
  for (long long step = r == 0 ? 1 : (2LL << top_bit(r)); r + step < size; step <<= 1)
    out.push_back(static_cast<int>(r + step));
  return out;
}

std::string rank_text(int r) { return "rank " + std::to_string(r); }

std::string text_of(const std::vector<std::byte>& b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

// The table as one frame: built once, sealed per child.
struct table_frame {
  std::array<std::byte, frame_header_bytes> header{};
  std::vector<std::array<std::byte, length_bytes>> lengths;
  digest payload{};
};

table_frame frame_of(const bootstrap_state& st) {
  table_frame f;
  f.header = encode_frame_header({kind::result, op::introduce, 0, 0, static_cast<std::uint32_t>(st.size)});
  payload_hash ph;
  for (const auto& a : st.link_addresses) {
    f.lengths.push_back(encode_length(a.size()));
    ph.add(std::as_bytes(std::span<const char>(a.data(), a.size())));
  }
  f.payload = ph.finish();
  return f;
}

// Connects to `child`, proves this rank knows the token (the child is the
// acceptor of a link handshake of round tree_round), sends the table.
result<void> pass_table(bootstrap_state& st, int child, const table_frame& f, deadline until) {
  const std::string& address = st.link_addresses[static_cast<std::size_t>(child)];
  const auto failed = [&](status code, const std::string& why) {
    return fail(code, rank_text(st.rank) + ": cannot pass the table of link addresses to " + rank_text(child) + " (" +
                          address + "), its child in the bootstrap tree: " + why);
  };
  auto where = parse_host_port(address, "link address");
  if (!where) return failed(status::provider_error, "a bad address");
  // The child's listener was open before it sent its address to rank 0: a
  // refusal means it is gone, not that it is late.
  auto attempt = connect_once(*where, until);
  if (!attempt.fd) return failed(status::peer_unreachable, attempt.error + " (did it exit?)");
  unique_fd fd = std::move(attempt.fd);
  set_nodelay(fd.get());
  transcript t;
  t.size = static_cast<std::uint32_t>(st.size);
  t.rank = static_cast<std::uint32_t>(st.rank);
  t.link = true;
  t.acceptor = static_cast<std::uint32_t>(child);
  t.round = tree_round;
  if (!random_bytes(t.rank_nonce)) return failed(status::provider_error, "no random bytes for a nonce");
  const auto hello = encode_link_hello(st.token, t.size, t.rank, t.round, t.rank_nonce);
  const std::span<const std::byte> hello_piece(hello);
  auto io = send_all(fd.get(), std::span(&hello_piece, 1), until);
  frame_parser challenge(2, mac_bytes);
  if (io.ok()) io = recv_frame(fd.get(), challenge, until);
  if (!io.ok()) return failed(io_status_code(io), describe(io));
  proof_frame proof;
  session s;
  switch (answer_challenge(st.token, t, challenge, proof, s)) {
    case challenge_check::ok: break;
    case challenge_check::not_a_challenge:
      return failed(status::provider_error, "it answered the tree hello with no challenge");
    case challenge_check::forged: return failed(status::access_denied, "the process there does not know the job token");
  }
  const digest mac = s.seal(f.header, f.payload);
  std::vector<std::span<const std::byte>> pieces{proof.head, proof.length, proof.mac, f.header};
  for (std::size_t i = 0; i < st.link_addresses.size(); ++i) {
    pieces.emplace_back(f.lengths[i]);
    const auto& a = st.link_addresses[i];
    pieces.emplace_back(std::as_bytes(std::span<const char>(a.data(), a.size())));
  }
  pieces.emplace_back(mac);
  io = send_all(fd.get(), pieces, until);
  if (!io.ok()) return failed(io_status_code(io), describe(io));
  retire(st, fd);
  return {};
}

// Every child, even after one failed (their subtrees need not wait for
// their timeout); the first failure is the result.
result<void> send_table(bootstrap_state& st, deadline until) {
  const table_frame f = frame_of(st);
  result<void> first{};
  for (int child : tree_children(st.rank, st.size)) {
    auto r = pass_table(st, child, f, until);
    if (!r && first) first = std::move(r);
  }
  return first;
}

// The table, read off a proved tree handshake from the parent.
result<void> read_table(bootstrap_state& st, link_accept& c, deadline until) {
  const int parent = static_cast<int>(c.t.rank);
  session s;
  s.key = session_key(st.token, c.t);
  s.outgoing = direction::root_to_rank;
  frame_parser table(static_cast<std::uint32_t>(st.size), max_address_bytes, /*with_mac=*/true);
  const auto io = recv_frame(c.fd.get(), table, until);
  const std::string from = rank_text(st.rank) + ": the table of link addresses from " + rank_text(parent) +
                           " (its parent in the bootstrap tree, " + peer_name(c.fd.get()) + ")";
  if (!io.ok()) return fail(io_status_code(io), from + " did not arrive: " + describe(io));
  if (!table.authentic(s)) return fail(status::access_denied, from + " failed authentication (forged or altered)");
  const auto& h = table.header();
  if (h.kind != kind::result || h.op != op::introduce || h.seq != 0 || h.count != static_cast<std::uint32_t>(st.size))
    return fail(status::provider_error, from + " is not a table of this job's size");
  st.link_addresses.clear();
  for (const auto& a : table.blobs()) st.link_addresses.push_back(text_of(a));
  retire(st, c.fd);
  return {};
}

// Waits on the link listener for the parent's tree handshake.
result<void> receive_table(bootstrap_state& st, deadline until) {
  const int parent = tree_parent(st.rank);
  // The parent's tree hello, or a link hello from a rank that had the
  // table first and already forms its links (kept for form_links).
  const int rounds = link_rounds(st.size);
  const auto expected = [&](const hello& h) {
    if (h.round == tree_round) return h.rank == static_cast<std::uint32_t>(parent);
    return h.round < rounds && h.rank == static_cast<std::uint32_t>(link_source(st.rank, st.size, h.round));
  };
  const int listen_fd = st.link_listener->fd.get();
  std::vector<link_accept> pending;
  std::vector<pollfd> fds;
  for (;;) {
    expire_pending(pending);
    fds.clear();
    fds.push_back({listen_fd, POLLIN, 0});
    for (const auto& c : pending) fds.push_back({c.fd.get(), POLLIN, 0});
    const int ready = poll_until(fds.data(), fds.size(), until.capped(pending_accept_limit));
    if (ready < 0 && errno != EINTR)
      return fail(status::provider_error,
                  rank_text(st.rank) + ": poll() failed waiting for the bootstrap tree: " + errno_text(errno));
    if (ready <= 0) {
      if (!until.expired()) continue;
      return fail(status::timed_out, rank_text(st.rank) +
                                         ": the job formed, but the table of link addresses did not "
                                         "come from " +
                                         rank_text(parent) + " (its parent in the bootstrap tree) within " +
                                         std::to_string(st.opts.connect_timeout.count()) +
                                         " ms (did it fail or exit?)");
    }
    for (std::size_t i = 0; i < pending.size(); ++i) {
      if (fds[1 + i].revents == 0) continue;
      auto& c = pending[i];
      const accept_step step = step_link_accept(st, c, expected, until);
      if (step == accept_step::forged)
        return fail(status::access_denied, rank_text(st.rank) + ": a connection from " + peer_name(c.fd.get()) +
                                               " claiming to be " + rank_text(static_cast<int>(c.t.rank)) +
                                               " failed authentication on this rank's link listener");
      if (step != accept_step::proved) continue;
      if (c.t.round != tree_round) {
        st.early_links.push_back(std::move(c));
        continue;
      }
      auto r = read_table(st, c, until);
      for (auto& other : pending)
        if (other.fd) st.early_links.push_back(std::move(other));
      return r;
    }
    if (fds[0].revents != 0) accept_pending(listen_fd, pending);
  }
}

}  // namespace

result<void> spread_link_addresses(bootstrap_state& st, deadline until) {
  // Listen where this rank reaches rank 0 from: an address the others can
  // reach too when they reach rank 0 (its own host for rank 0).
  const int via = st.rank == 0 ? st.peers[1].get() : st.root.get();
  const std::string host = local_host(via);
  if (host.empty())
    return fail(
        status::provider_error,
        rank_text(st.rank) + ": cannot read the local address of the bootstrap connection: " + errno_text(errno));
  auto listen = listen_on(host_port{host, 0}, until);
  if (!listen) return unexpected(listen.error());
  const std::string mine = format_host_port(listen->host, listen->port);
  st.link_listener = std::move(*listen);
  auto all = run_introduce(st, std::as_bytes(std::span<const char>(mine.data(), mine.size())), until);
  if (!all) return unexpected(all.error());
  // The star's work is done: from here no rank holds a connection to rank 0.
  for (auto& p : st.peers) retire(st, p);
  retire(st, st.root);
  if (st.rank == 0) {
    for (const auto& a : *all) st.link_addresses.push_back(text_of(a));
  } else if (auto r = receive_table(st, until); !r) {
    return r;
  }
  return send_table(st, until);
}

}  // namespace fabrix::detail::boot
