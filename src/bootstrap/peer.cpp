// A rank > 0 joins the job: connect to rank 0 (retrying while it is not
// listening yet), send the hello, wait for the welcome.
#include "state.hpp"

#include <string>

namespace fabrix::detail::boot {

namespace {

std::string ms_text(std::chrono::milliseconds d) { return std::to_string(d.count()) + " ms"; }

}  // namespace

result<bootstrap> join_root(int rank, int size, std::string_view root_address, std::string_view token,
                            const bootstrap_options& opts) {
  auto where = parse_host_port(root_address, "bootstrap root address");
  if (!where) return unexpected(where.error());
  const std::string root_text = format_host_port(where->host, where->port);
  const std::string me = "rank " + std::to_string(rank);
  if (where->port == 0)
    return fail(status::invalid_argument, me + ": bootstrap root address " + root_text + " has port 0");

  const auto hello = encode_hello(static_cast<std::uint32_t>(size), static_cast<std::uint32_t>(rank), token);
  const std::span<const std::byte> hello_piece(hello);
  const deadline reach_until = deadline::after(opts.connect_timeout);
  auto backoff = std::chrono::milliseconds(10);
  std::string last_error = "no attempt made";
  status last_status = status::timed_out;

  for (;;) {
    auto attempt = connect_once(*where, reach_until);
    if (attempt.fatal)
      return fail(status::invalid_argument, me + ": bootstrap root " + root_text + ": " + attempt.error);
    if (attempt.fd) {
      // Rank 0 has connect_timeout from its own start to assemble the job; we
      // give it that long from the moment our connection was accepted.
      const deadline assembled_until = deadline::after(opts.connect_timeout);
      auto io = send_all(attempt.fd.get(), std::span(&hello_piece, 1), assembled_until);
      frame_parser answer(0);
      if (io.ok()) io = recv_frame(attempt.fd.get(), answer, assembled_until);
      if (io.ok() && answer.header().kind == kind::welcome) {
        if (answer.header().count != static_cast<std::uint32_t>(size))
          return fail(status::invalid_argument, me + ": bootstrap root " + root_text + " hosts a job of size " +
                                                    std::to_string(answer.header().count) + ", expected " +
                                                    std::to_string(size));
        auto st = std::make_unique<bootstrap_state>();
        st->rank = rank;
        st->size = size;
        st->opts = opts;
        st->root_address = root_text;
        st->root = std::move(attempt.fd);
        return bootstrap_access::make(std::move(st));
      }
      if (io.ok() && answer.header().kind == kind::reject) {
        const auto why = static_cast<reject_reason>(answer.header().aux);
        const std::string text =
            me + ": bootstrap root " + root_text + " refused this rank: " + std::string(describe(why));
        if (why == reject_reason::size)
          return fail(status::invalid_argument, text + " (root has " + std::to_string(answer.header().count) +
                                                    ", this rank says " + std::to_string(size) + ")");
        if (why == reject_reason::rank || why == reject_reason::duplicate) return fail(status::invalid_argument, text);
        // Token or version: maybe another job's root holds the port for now.
        last_status = status::access_denied;
        last_error = text + " (check FABRIX_JOB_TOKEN; is another job using this port?)";
      } else if (io.ok()) {
        return fail(status::provider_error,
                    me + ": bootstrap root " + root_text + " answered the hello with an unexpected frame");
      } else if (io.status == io_status::timed_out) {
        return fail(status::timed_out, me + ": connected to bootstrap root " + root_text +
                                           " but the job was not assembled within " + ms_text(opts.connect_timeout) +
                                           " (another rank missing?)");
      } else if (io.status == io_status::malformed) {
        return fail(status::provider_error,
                    me + ": bootstrap root " + root_text + " is not a fabrix bootstrap (" + describe(io) + ")");
      } else {
        return fail(status::peer_unreachable, me + ": bootstrap root " + root_text +
                                                  " dropped the connection before the job was assembled (" +
                                                  describe(io) + "; did it time out waiting for other ranks?)");
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
