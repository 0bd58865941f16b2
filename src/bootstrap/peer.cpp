// A rank > 0 joins the job: connect to rank 0 (retrying while it is not
// listening yet, or when it dropped this connection before the handshake
// finished), send the hello, check rank 0's challenge (it must prove it knows
// the job token before this rank answers anything), send the proof, wait for
// the authenticated welcome.
#include "state.hpp"

#include <string>

namespace fabrix::detail::boot {

namespace {

std::string ms_text(std::chrono::milliseconds d) { return std::to_string(d.count()) + " ms"; }

}  // namespace

result<bootstrap> join_root(int rank, int size, std::string_view root_address, std::string_view token,
                            const bootstrap_options& opts, progress_hook* hook) {
  auto where = parse_host_port(root_address, "bootstrap root address");
  if (!where) return unexpected(where.error());
  const std::string root_text = format_host_port(where->host, where->port);
  const std::string me = "rank " + std::to_string(rank);
  if (where->port == 0)
    return fail(status::invalid_argument, me + ": bootstrap root address " + root_text + " has port 0");

  const deadline reach_until = deadline::after(opts.connect_timeout, hook);
  auto backoff = std::chrono::milliseconds(10);
  std::string last_error = "no attempt made";
  status last_status = status::timed_out;
  int dropped = 0;  // connections rank 0 closed before the handshake finished

  for (;;) {
    auto attempt = connect_once(*where, reach_until);
    if (attempt.fatal)
      return fail(status::invalid_argument, me + ": bootstrap root " + root_text + ": " + attempt.error);
    if (attempt.fd) {
      // Rank 0 has connect_timeout from its own start to assemble the job; we
      // give it that long from the moment our connection was accepted.
      const deadline assembled_until = deadline::after(opts.connect_timeout, hook);
      transcript t;
      t.size = static_cast<std::uint32_t>(size);
      t.rank = static_cast<std::uint32_t>(rank);
      if (!random_bytes(t.rank_nonce))
        return fail(status::provider_error, me + ": no random bytes for a nonce (getrandom failed)");
      const auto hello = encode_hello(token, t.size, t.rank, t.rank_nonce);
      const std::span<const std::byte> hello_piece(hello);
      auto io = send_all(attempt.fd.get(), std::span(&hello_piece, 1), assembled_until);
      frame_parser challenge(2, mac_bytes);
      if (io.ok()) io = recv_frame(attempt.fd.get(), challenge, assembled_until);
      const auto& ch = challenge.header();
      proof_frame proof;
      session s;
      const challenge_check verdict =
          io.ok() ? answer_challenge(token, t, challenge, proof, s) : challenge_check::not_a_challenge;
      if (verdict != challenge_check::not_a_challenge) {
        if (verdict == challenge_check::forged) {
          // Nothing was revealed: we answer only a root that proved itself.
          last_status = status::access_denied;
          last_error = me + ": bootstrap root " + root_text +
                       " failed authentication: its challenge does not prove it knows the job token (not the real "
                       "rank 0: another job or process on this port, or a different FABRIX_JOB_TOKEN); refused it";
        } else {
          const std::span<const std::byte> pieces[] = {proof.head, proof.length, proof.mac};
          io = send_all(attempt.fd.get(), pieces, assembled_until);
          frame_parser answer(0, 0, /*with_mac=*/true);
          if (io.ok()) io = recv_frame(attempt.fd.get(), answer, assembled_until);
          if (io.ok() && !answer.authentic(s))
            return fail(status::access_denied,
                        me + ": the answer of bootstrap root " + root_text +
                            " to this rank's proof failed authentication (forged or altered in transit: is "
                            "something between this rank and rank 0?); refused");
          if (io.ok() && answer.header().kind == kind::welcome) {
            if (answer.header().count != static_cast<std::uint32_t>(size))
              return fail(status::invalid_argument, me + ": bootstrap root " + root_text + " hosts a job of size " +
                                                        std::to_string(answer.header().count) + ", expected " +
                                                        std::to_string(size));
            const std::uint16_t exchange = answer.header().aux;
            if (exchange != exchange_star && exchange != exchange_peer_to_peer)
              return fail(status::provider_error, me + ": bootstrap root " + root_text +
                                                      " chose an exchange this rank does not know (" +
                                                      std::to_string(exchange) + ")");
            auto st = std::make_unique<bootstrap_state>();
            st->rank = rank;
            st->size = size;
            st->opts = opts;
            st->token = std::string(token);
            st->exchange = exchange;
            st->root_address = root_text;
            st->root = std::move(attempt.fd);
            st->root_session = s;
            if (exchange == exchange_peer_to_peer) {
              if (auto r = spread_link_addresses(*st, assembled_until); !r) return unexpected(r.error());
            }
            return bootstrap_access::make(std::move(st));
          }
          if (io.ok() && answer.header().kind == kind::reject) {
            const auto why = static_cast<reject_reason>(answer.header().aux);
            const std::string text =
                me + ": bootstrap root " + root_text + " refused this rank: " + std::string(describe(why));
            if (why == reject_reason::size)
              return fail(status::invalid_argument, text + " (root has " + std::to_string(answer.header().count) +
                                                        ", this rank says " + std::to_string(size) + ")");
            return fail(status::invalid_argument, text);
          }
          if (io.ok())
            return fail(status::provider_error,
                        me + ": bootstrap root " + root_text + " answered the proof with an unexpected frame");
          if (io.status == io_status::timed_out)
            return fail(status::timed_out, me + ": authenticated with bootstrap root " + root_text +
                                               " but the job was not assembled within " +
                                               ms_text(opts.connect_timeout) + " (another rank missing?)");
          if (io.status == io_status::malformed)
            return fail(status::provider_error,
                        me + ": bootstrap root " + root_text + " is not a fabrix bootstrap (" + describe(io) + ")");
          return fail(status::peer_unreachable, me + ": bootstrap root " + root_text +
                                                    " dropped the connection after authenticating this rank, before "
                                                    "the job was assembled (" +
                                                    describe(io) +
                                                    "; did rank 0 time out waiting for other ranks, or exit?)");
        }
      } else if (io.ok() && ch.kind == kind::reject) {
        // Unauthenticated (sent before the handshake): a hint, and we keep trying.
        last_status = status::access_denied;
        last_error = me + ": bootstrap root " + root_text + " refused this rank before the handshake: " +
                     std::string(describe(static_cast<reject_reason>(ch.aux))) +
                     " (this rank speaks bootstrap protocol version " + std::to_string(wire_version) +
                     "; is another job or fabrix version using this port?)";
      } else if (io.ok()) {
        return fail(status::provider_error,
                    me + ": bootstrap root " + root_text + " answered the hello with an unexpected frame");
      } else if (io.status == io_status::timed_out) {
        return fail(status::timed_out, me + ": connected to bootstrap root " + root_text +
                                           " but it did not answer the hello within " + ms_text(opts.connect_timeout) +
                                           " (rank 0 not accepting yet, or not a fabrix bootstrap?)");
      } else if (io.status == io_status::malformed) {
        return fail(status::provider_error,
                    me + ": bootstrap root " + root_text + " is not a fabrix bootstrap (" + describe(io) + ")");
      } else {
        // Rank 0 dropped us before the challenge: under load (a flood of
        // connections at its port) it drops the handshakes that made the
        // least progress. Connect again.
        ++dropped;
        last_status = status::peer_unreachable;
        last_error = me + ": bootstrap root " + root_text +
                     " closed the connection before the handshake finished (evicted under load?) " +
                     std::to_string(dropped) + " time(s) (" + describe(io) + "); retried";
        backoff = std::chrono::milliseconds(10);
      }
    } else {
      last_error = me + ": cannot reach bootstrap root " + root_text + " (" + attempt.error + ")";
    }
    if (reach_until.expired())
      return fail(last_status, last_error + "; gave up after " + ms_text(opts.connect_timeout));
    sleep_for(backoff, reach_until);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(250));
  }
}

}  // namespace fabrix::detail::boot
