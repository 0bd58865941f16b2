// Rank 0's side of job assembly: listen, then accept connections and check
// each one's hello until every rank 1..size-1 has joined. Connections that
// fail the checks are refused (closed) and the wait goes on, so a stranger on
// the port can neither join nor stall the job.
#include "state.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <cerrno>

#include <deque>
#include <string>
#include <vector>

namespace fabrix::detail::boot {

namespace {

// Connections accepted but whose hello is not complete yet. Beyond this
// many the oldest is dropped, so a flood of idle connections costs a bounded
// number of descriptors.
constexpr std::size_t max_pending = 64;

struct pending_conn {
  unique_fd fd;
  std::string address;
  std::vector<std::byte> buf = std::vector<std::byte>(hello_fixed_bytes);
  std::size_t filled = 0;
  bool have_prefix = false;
  hello_prefix prefix{};
};

// Best effort: a fresh connection has an empty send buffer, so this small
// frame does not block. The peer learns why it was refused.
void send_reject(int fd, reject_reason why, int size) {
  const auto h = encode_frame_header(
      {kind::reject, op::none, static_cast<std::uint16_t>(why), 0, static_cast<std::uint32_t>(size)});
  (void)::send(fd, h.data(), h.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

struct assembly {
  bootstrap_root_state& root;
  bootstrap_state& st;
  int joined = 0;
  int refused = 0;
  std::string last_refusal;

  void refuse(pending_conn& c, std::string why) {
    ++refused;
    last_refusal = c.address + ": " + std::move(why);
    c.fd.reset();
  }

  // Reads more of a pending hello; closes the connection when it is
  // complete (moved to a rank slot) or refused. Returns true when `c` is done.
  bool advance(pending_conn& c) {
    for (;;) {
      const std::size_t need = c.buf.size() - c.filled;
      const ssize_t n = ::recv(c.fd.get(), c.buf.data() + c.filled, need, MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
      if (n <= 0) {
        c.fd.reset();  // gone before finishing its hello; not worth a refusal count
        return true;
      }
      c.filled += static_cast<std::size_t>(n);
      if (c.filled < c.buf.size()) continue;
      if (!c.have_prefix) {
        c.prefix = decode_hello_prefix(std::span<const std::byte, hello_fixed_bytes>(c.buf.data(), hello_fixed_bytes));
        if (c.prefix.magic != wire_magic || c.prefix.kind != static_cast<std::uint8_t>(kind::hello)) {
          refuse(c, "not a fabrix bootstrap hello");
          return true;
        }
        if (c.prefix.version != wire_version) {
          send_reject(c.fd.get(), reject_reason::version, 0);
          refuse(c,
                 "protocol version " + std::to_string(c.prefix.version) + ", expected " + std::to_string(wire_version));
          return true;
        }
        if (c.prefix.token_len > max_token_bytes) {
          refuse(c, "job token too long");
          return true;
        }
        c.have_prefix = true;
        c.buf.resize(hello_fixed_bytes + c.prefix.token_len);
        if (c.filled < c.buf.size()) continue;
      }
      finish(c);
      return true;
    }
  }

  void finish(pending_conn& c) {
    const std::string_view token(reinterpret_cast<const char*>(c.buf.data()) + hello_fixed_bytes, c.prefix.token_len);
    // Nothing about the job is revealed before the token matched.
    if (!tokens_equal(token, root.token)) {
      send_reject(c.fd.get(), reject_reason::token, 0);
      return refuse(c, "job token mismatch");
    }
    if (c.prefix.size != static_cast<std::uint32_t>(root.size)) {
      send_reject(c.fd.get(), reject_reason::size, root.size);
      return refuse(c,
                    "claims job size " + std::to_string(c.prefix.size) + ", this job has " + std::to_string(root.size));
    }
    const std::uint32_t r = c.prefix.rank;
    if (r == 0 || r >= static_cast<std::uint32_t>(root.size)) {
      send_reject(c.fd.get(), reject_reason::rank, root.size);
      return refuse(c, "claims rank " + std::to_string(r) + ", expected 1.." + std::to_string(root.size - 1));
    }
    if (st.peers[r]) {
      send_reject(c.fd.get(), reject_reason::duplicate, root.size);
      return refuse(c, "claims rank " + std::to_string(r) + ", already joined from " + st.peer_addresses[r]);
    }
    st.peers[r] = std::move(c.fd);
    st.peer_addresses[r] = c.address;
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

result<bootstrap> accept_peers(bootstrap_root_state& root, deadline until) {
  auto st = std::make_unique<bootstrap_state>();
  st->rank = 0;
  st->size = root.size;
  st->opts = root.opts;
  st->root_address = root.address;
  st->peers.resize(static_cast<std::size_t>(root.size));
  st->peer_addresses.resize(static_cast<std::size_t>(root.size));
  assembly as{root, *st, 0, 0, {}};
  std::deque<pending_conn> pending;
  const int listen_fd = root.listen.fd.get();

  std::vector<pollfd> fds;
  std::vector<std::size_t> polled_ranks;
  while (as.joined < root.size - 1) {
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
    const int n = ::poll(fds.data(), fds.size(), until.poll_ms());
    if (n < 0 && errno != EINTR)
      return fail(status::provider_error, "rank 0: poll() failed while assembling the job: " + errno_text(errno));
    if (n == 0 && until.expired()) {
      std::string m = "rank 0: timed out after " + std::to_string(root.opts.connect_timeout.count()) +
                      " ms waiting for rank(s) " + as.missing_ranks() + " of job size " + std::to_string(root.size) +
                      " to connect to " + root.address + " (" + std::to_string(as.joined) + " of " +
                      std::to_string(root.size - 1) + " peers joined";
      if (as.refused > 0) m += "; " + std::to_string(as.refused) + " connection(s) refused, last: " + as.last_refusal;
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
    std::size_t i = 1;
    for (auto it = pending.begin(); it != pending.end(); ++i) {
      if (fds[i].revents != 0 && as.advance(*it))
        it = pending.erase(it);
      else
        ++it;
    }
    if (fds[0].revents != 0) {
      for (;;) {
        const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
          if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
          if (errno == EMFILE || errno == ENFILE)
            return fail(status::no_memory, "rank 0: out of file descriptors accepting peers on " + root.address +
                                               " (a job of size " + std::to_string(root.size) + " needs " +
                                               std::to_string(root.size - 1) + ")");
          break;  // EAGAIN, or an error of that one connection
        }
        pending_conn c;
        c.fd.reset(fd);
        set_nodelay(fd);
        c.address = peer_name(fd);
        pending.push_back(std::move(c));
        if (pending.size() > max_pending) pending.pop_front();
      }
    }
  }

  // Everybody is here: let them go. A rank that died meanwhile is found by
  // the first collective.
  const auto welcome = encode_frame_header({kind::welcome, op::none, 0, 0, static_cast<std::uint32_t>(root.size)});
  const std::span<const std::byte> piece(welcome);
  for (std::size_t r = 1; r < st->peers.size(); ++r) {
    const auto io = send_all(st->peers[r].get(), std::span(&piece, 1), until);
    if (!io.ok())
      return fail(
          io.status == io_status::timed_out ? status::timed_out : status::peer_unreachable,
          "rank 0: cannot welcome rank " + std::to_string(r) + " (" + st->peer_addresses[r] + "): " + describe(io));
  }
  root.listen.fd.reset();
  return bootstrap_access::make(std::move(st));
}

}  // namespace fabrix::detail::boot
