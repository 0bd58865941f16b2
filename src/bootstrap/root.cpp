// Rank 0's side of job assembly: listen, then accept connections and run
// each one's handshake (hello, challenge, proof: see wire.hpp) until every
// rank 1..size-1 has proven it knows the job token. Connections that fail
// are refused (closed) and the wait goes on, so a stranger on the port can
// neither join nor stall the job.
//
// Under a flood of connections that never authenticate, the work is bounded:
// at most max_pending handshakes in progress (max_pending_per_source from one
// host), each given handshake_limit to finish, and at most
// max_accepts_per_round new connections per poll round, so the handshakes
// already under way (real ranks answer within a round trip) are served
// between bursts. When a bound is hit, the pending handshake that has made
// the least progress (then the oldest) is dropped, from the host that holds
// the most; a hello whose hello_mac was made with the job's token (wire.hpp)
// counts as more progress than any other, so strangers on the same host as a
// real rank, even ones that send well-formed hellos, are dropped before it.
// A real rank dropped anyway (only by other vouched hellos: real ranks or
// replays) sees its connection close before the handshake finished and
// retries. Authenticated ranks are never dropped.
#include "state.hpp"

#include <fabrix/detail/env.hpp>

#include <poll.h>
#include <sys/socket.h>
#include <cerrno>
#include <cstdlib>

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace fabrix::detail::boot {

namespace {

constexpr std::size_t max_pending = 128;
constexpr std::size_t max_pending_per_source = 32;
constexpr std::size_t max_accepts_per_round = 32;
constexpr std::chrono::milliseconds handshake_limit{2000};

enum class hs_stage { hello, proof };

struct pending_conn {
  unique_fd fd;
  std::string address;  // host:port
  std::string source;   // host
  clock::time_point since{};
  hs_stage at = hs_stage::hello;
  bool vouched = false;  // its hello_mac was made with the job's token
  std::array<std::byte, hello_bytes> buf{};
  std::size_t filled = 0;
  transcript t{};
  std::optional<frame_parser> proof;

  // 0: nothing received, 1: part of a hello, 2: challenged, waiting for the
  // proof, 3: the same after a vouched hello.
  int progress() const noexcept {
    if (at == hs_stage::proof) return vouched ? 3 : 2;
    return filled > 0 ? 1 : 0;
  }
};

// Best effort, before authentication (a version mismatch): a fresh
// connection has an empty send buffer, so this small frame does not block.
void send_reject(int fd, reject_reason why, int size) {
  const auto h = encode_frame_header(
      {kind::reject, op::none, static_cast<std::uint16_t>(why), 0, static_cast<std::uint32_t>(size)});
  (void)::send(fd, h.data(), h.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

// Sends a small frame whole without waiting; false when it did not fit.
bool send_now(int fd, std::span<const std::span<const std::byte>> pieces) {
  std::vector<std::byte> all;
  for (auto p : pieces) all.insert(all.end(), p.begin(), p.end());
  const ssize_t n = ::send(fd, all.data(), all.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  return n == static_cast<ssize_t>(all.size());
}

std::string host_of(const std::string& address) {
  const auto colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

struct assembly {
  bootstrap_root_state& root;
  bootstrap_state& st;
  int joined = 0;
  int refused = 0;
  int evicted = 0;
  int expired = 0;
  int left = 0;
  std::string last_refusal;

  void refuse(pending_conn& c, std::string why) {
    ++refused;
    last_refusal = c.address + ": " + std::move(why);
    c.fd.reset();
  }

  // Reads what `c` sent and moves its handshake on. `c.fd` is reset when it
  // is done: joined (moved to its rank slot), refused or gone.
  void advance(pending_conn& c) {
    if (c.at == hs_stage::hello) {
      for (;;) {
        const ssize_t n = ::recv(c.fd.get(), c.buf.data() + c.filled, c.buf.size() - c.filled, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (n <= 0) {
          ++left;
          c.fd.reset();  // gone before finishing its hello
          return;
        }
        c.filled += static_cast<std::size_t>(n);
        if (c.filled >= hello_prefix_bytes) {
          const hello h = decode_hello(std::span<const std::byte>(c.buf.data(), c.filled));
          if (h.magic != wire_magic || h.kind != static_cast<std::uint8_t>(kind::hello))
            return refuse(c, "not a fabrix bootstrap hello");
          if (h.version != wire_version) {
            send_reject(c.fd.get(), reject_reason::version, 0);
            return refuse(
                c, "protocol version " + std::to_string(h.version) + ", expected " + std::to_string(wire_version));
          }
        }
        if (c.filled == hello_bytes) break;
      }
      const hello h = decode_hello(c.buf);
      c.vouched = hello_vouched(root.token, c.buf);
      c.t = transcript{wire_version, h.size, h.rank, h.rank_nonce, {}};
      if (!random_bytes(c.t.root_nonce)) return refuse(c, "no random bytes for a nonce (getrandom failed)");
      // Proves to the rank that this is the real rank 0; reveals nothing
      // about the job (size and rank are the ones the hello claimed).
      const digest mac = challenge_mac(root.token, c.t);
      const auto head = encode_frame_header({kind::challenge, op::none, 0, 0, 2});
      const auto nlen = encode_length(nonce_bytes);
      const auto mlen = encode_length(mac_bytes);
      const std::span<const std::byte> pieces[] = {head, nlen, c.t.root_nonce, mlen, mac};
      if (!send_now(c.fd.get(), pieces)) return refuse(c, "cannot send the challenge");
      c.at = hs_stage::proof;
      c.proof.emplace(1u, mac_bytes);
    }
    auto& p = *c.proof;
    const auto io = recv_available(c.fd.get(), p);
    if (!io.ok()) {
      if (io.status == io_status::malformed) return refuse(c, "malformed proof: " + io.detail);
      ++left;
      c.fd.reset();
      return;
    }
    if (!p.done()) return;
    const auto& h = p.header();
    if (h.kind != kind::proof || h.count != 1 || p.blobs().front().size() != mac_bytes)
      return refuse(c, "sent something else than a proof");
    const digest want = proof_mac(root.token, c.t);
    if (!digests_equal(want, std::span<const std::byte, mac_bytes>(p.blobs().front().data(), mac_bytes)))
      return refuse(c, "failed authentication (wrong job token, or a replayed proof)");
    finish(c);
  }

  // Authenticated: check what it claims; answer a refusal with a frame the
  // rank can verify.
  void finish(pending_conn& c) {
    session s;
    s.key = session_key(root.token, c.t);
    s.outgoing = direction::root_to_rank;
    const auto reject = [&](reject_reason why, std::string text) {
      const auto h = encode_frame_header(
          {kind::reject, op::none, static_cast<std::uint16_t>(why), 0, static_cast<std::uint32_t>(root.size)});
      const digest mac = s.seal(h, payload_digest({}));
      const std::span<const std::byte> pieces[] = {h, mac};
      (void)send_now(c.fd.get(), pieces);
      refuse(c, std::move(text));
    };
    if (c.t.size != static_cast<std::uint32_t>(root.size))
      return reject(reject_reason::size,
                    "claims job size " + std::to_string(c.t.size) + ", this job has " + std::to_string(root.size));
    const std::uint32_t r = c.t.rank;
    if (r == 0 || r >= static_cast<std::uint32_t>(root.size))
      return reject(reject_reason::rank,
                    "claims rank " + std::to_string(r) + ", expected 1.." + std::to_string(root.size - 1));
    if (st.peers[r])
      return reject(reject_reason::duplicate,
                    "claims rank " + std::to_string(r) + ", already joined from " + st.peer_addresses[r]);
    st.peers[r] = std::move(c.fd);
    st.peer_addresses[r] = c.address;
    st.peer_sessions[r] = s;
    ++joined;
  }

  std::string missing_ranks() const {
    std::string out;
    int listed = 0;
    for (int r = 1; r < root.size; ++r) {
      if (st.peers[static_cast<std::size_t>(r)]) continue;
      if (listed == 16) {
        out += ", ...";
        break;
      }
      if (listed++ > 0) out += ", ";
      out += std::to_string(r);
    }
    return out;
  }
};

// Drops the pending handshake that has made the least progress (then the
// oldest) among those from `source` (any source when empty). One waiting for
// its proof is read first: a real rank's proof arrives a round trip after
// the challenge, and one that has arrived completes instead of being dropped.
void evict_one(std::vector<pending_conn>& pending, const std::string& source, assembly& as) {
  pending_conn* worst = nullptr;
  for (auto& c : pending) {
    if (!c.fd || (!source.empty() && c.source != source)) continue;
    if (worst == nullptr || c.progress() < worst->progress() ||
        (c.progress() == worst->progress() && c.since < worst->since))
      worst = &c;
  }
  if (worst == nullptr) return;
  if (worst->at == hs_stage::proof) {
    as.advance(*worst);
    if (!worst->fd) return;  // done (joined, refused or gone): room was made
  }
  worst->fd.reset();
  ++as.evicted;
}

}  // namespace

result<bootstrap_root> listen_root(int size, std::string_view bind_address, std::string_view token,
                                   const bootstrap_options& opts, deadline until) {
  auto where = parse_host_port(bind_address, "bootstrap address");
  if (!where) return unexpected(where.error());
  auto l = listen_on(*where, until);
  if (!l) return unexpected(l.error());
  auto rs = std::make_unique<bootstrap_root_state>();
  rs->size = size;
  rs->token = std::string(token);
  rs->opts = opts;
  rs->address = format_host_port(l->host, l->port);
  rs->listen = std::move(*l);
  return bootstrap_access::make_root(std::move(rs));
}

namespace {

// Rank 0's choice of exchange for the job (bootstrap_options::exchange).
result<std::uint16_t> choose_exchange(const bootstrap_options& opts, int size) {
  bootstrap_exchange e = opts.exchange;
  if (e == bootstrap_exchange::automatic) {
    const char* v = env_text("FABRIX_BOOTSTRAP_EXCHANGE");
    const std::string text = v != nullptr ? v : "";
    if (text == "star")
      e = bootstrap_exchange::star;
    else if (text == "peer_to_peer")
      e = bootstrap_exchange::peer_to_peer;
    else if (!text.empty() && text != "auto")
      return fail(status::invalid_argument,
                  "FABRIX_BOOTSTRAP_EXCHANGE=" + text + ": expected star, peer_to_peer or auto (or unset)");
  }
  if (e == bootstrap_exchange::automatic) e = size <= 8 ? bootstrap_exchange::star : bootstrap_exchange::peer_to_peer;
  return e == bootstrap_exchange::star ? exchange_star : exchange_peer_to_peer;
}

}  // namespace

result<bootstrap> accept_peers(bootstrap_root_state& root, deadline until) {
  auto exchange = choose_exchange(root.opts, root.size);
  if (!exchange) return unexpected(exchange.error());
  auto st = std::make_unique<bootstrap_state>();
  st->rank = 0;
  st->size = root.size;
  st->opts = root.opts;
  st->token = root.token;
  st->exchange = *exchange;
  st->root_address = root.address;
  st->peers.resize(static_cast<std::size_t>(root.size));
  st->peer_addresses.resize(static_cast<std::size_t>(root.size));
  st->peer_sessions.resize(static_cast<std::size_t>(root.size));
  assembly as{root, *st, 0, 0, 0, 0, 0, {}};
  std::vector<pending_conn> pending;
  const int listen_fd = root.listen.fd.get();
  const auto drop_closed = [&] { std::erase_if(pending, [](const pending_conn& c) { return !c.fd; }); };

  std::vector<pollfd> fds;
  std::vector<std::size_t> polled_ranks;
  while (as.joined < root.size - 1) {
    // Handshakes that take too long make room (a real rank answers within a round trip).
    const auto now = clock::now();
    for (auto& c : pending) {
      if (now - c.since < std::min(handshake_limit, root.opts.connect_timeout)) continue;
      c.fd.reset();
      ++as.expired;
    }
    drop_closed();
    // [0] listener, then the pending connections, then the joined ranks
    // (watched so that one leaving before the welcome frees its slot).
    fds.clear();
    fds.push_back({listen_fd, POLLIN, 0});
    for (auto& c : pending) fds.push_back({c.fd.get(), POLLIN, 0});
    polled_ranks.clear();
    for (std::size_t r = 1; r < st->peers.size(); ++r) {
      if (!st->peers[r]) continue;
      fds.push_back({st->peers[r].get(), POLLIN, 0});
      polled_ranks.push_back(r);
    }
    // Wake up now and then to expire stale handshakes.
    const int n = poll_until(fds.data(), fds.size(), until.capped(std::chrono::milliseconds(250)));
    if (n < 0 && errno != EINTR)
      return fail(status::provider_error, "rank 0: poll() failed while assembling the job: " + errno_text(errno));
    if (n == 0 && until.expired()) {
      std::string m = "rank 0: timed out after " + std::to_string(root.opts.connect_timeout.count()) +
                      " ms waiting for rank(s) " + as.missing_ranks() + " of job size " + std::to_string(root.size) +
                      " to connect to " + root.address + " (" + std::to_string(as.joined) + " of " +
                      std::to_string(root.size - 1) + " peers joined";
      if (as.refused > 0) m += "; " + std::to_string(as.refused) + " connection(s) refused, last: " + as.last_refusal;
      if (as.evicted > 0)
        m += "; " + std::to_string(as.evicted) + " unauthenticated connection(s) dropped under load (a flood?)";
      if (as.expired > 0) m += "; " + std::to_string(as.expired) + " did not finish the handshake in time";
      m += ")";
      return fail(status::timed_out, std::move(m));
    }
    if (n <= 0) continue;

    // Joined ranks first (before pending hellos fill more slots). A joined
    // rank sends nothing before the welcome: readable means it left (or
    // misbehaves). Free the slot; it may come back.
    const std::size_t first_joined = 1 + pending.size();
    for (std::size_t k = 0; k < polled_ranks.size(); ++k) {
      if (fds[first_joined + k].revents == 0) continue;
      st->peers[polled_ranks[k]].reset();
      --as.joined;
    }
    for (std::size_t i = 0; i < pending.size(); ++i)
      if (fds[1 + i].revents != 0) as.advance(pending[i]);
    drop_closed();
    if (as.joined == root.size - 1) break;
    if (fds[0].revents != 0) {
      for (std::size_t accepted = 0; accepted < max_accepts_per_round; ++accepted) {
        const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
          if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
          if (errno == EMFILE || errno == ENFILE) {
            if (!pending.empty()) {  // make room: the flood pays, not the job
              evict_one(pending, {}, as);
              drop_closed();
              continue;
            }
            return fail(status::no_memory, "rank 0: out of file descriptors accepting peers on " + root.address +
                                               " (a job of size " + std::to_string(root.size) + " needs " +
                                               std::to_string(root.size - 1) + ")");
          }
          break;  // EAGAIN, or an error of that one connection
        }
        pending_conn c;
        c.fd.reset(fd);
        set_nodelay(fd);
        c.address = peer_name(fd);
        c.source = host_of(c.address);
        c.since = clock::now();
        // A real rank sent its hello right after connecting: it is usually
        // here already, and the challenge goes out before the next burst.
        // Read first, so garbage is refused without taking anyone's place
        // and a vouched hello counts when the bounds choose whom to drop.
        as.advance(c);
        if (c.fd) {  // still under way (not joined, refused or gone)
          pending.push_back(std::move(c));
          std::map<std::string, std::size_t> per_source;
          for (const auto& p : pending) ++per_source[p.source];
          const std::string source = pending.back().source;
          if (per_source[source] > max_pending_per_source) {
            evict_one(pending, source, as);
          } else if (pending.size() > max_pending) {
            const auto most = std::max_element(per_source.begin(), per_source.end(),
                                               [](const auto& a, const auto& b) { return a.second < b.second; });
            evict_one(pending, most->first, as);
          }
          drop_closed();
        }
        if (as.joined == root.size - 1) break;
      }
    }
  }

  // Everybody is here: let them go, each with a welcome it can verify.
  const auto welcome =
      encode_frame_header({kind::welcome, op::none, st->exchange, 0, static_cast<std::uint32_t>(root.size)});
  const digest empty = payload_digest({});
  for (std::size_t r = 1; r < st->peers.size(); ++r) {
    const digest mac = st->peer_sessions[r].seal(welcome, empty);
    const std::span<const std::byte> pieces[] = {welcome, mac};
    const auto io = send_all(st->peers[r].get(), pieces, until);
    if (!io.ok())
      return fail(
          io.status == io_status::timed_out ? status::timed_out : status::peer_unreachable,
          "rank 0: cannot welcome rank " + std::to_string(r) + " (" + st->peer_addresses[r] + "): " + describe(io));
  }
  root.listen.fd.reset();
  if (st->exchange == exchange_peer_to_peer && root.size > 1) {  // a job of one rank has nobody to link to
    if (auto r = spread_link_addresses(*st, until); !r) return unexpected(r.error());
  }
  return bootstrap_access::make(std::move(st));
}

}  // namespace fabrix::detail::boot
