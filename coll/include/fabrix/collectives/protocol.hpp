// How a communicator's own completions and its peers' notifications move
// its channels (channel.hpp): chunks landing, credits going out and coming
// back, probes of silent peers, aborts. Out-of-class members of
// communicator (communicator.hpp includes this file).
#pragma once

#include <fabrix/collectives/communicator.hpp>

#include <cstdint>
#include <string>

namespace fabrix::coll {

template <provider P>
std::string communicator<P>::describe_channels() const {
  std::string out = "channels (sent/acked, consumed/released/credited, ops in flight " +
                    std::to_string(live_.outstanding) + ", " + std::to_string(live_.probes_in_flight) + " probes):";
  for (int p = 0; p < size(); ++p)
    if (p != rank()) out += " rank " + std::to_string(p) + " " + channels_[p].describe() + ";";
  return out;
}

template <provider P>
result<void> communicator<P>::notify_until(int peer, detail::notify_kind kind, std::uint64_t counter,
                                           clock::time_point until) {
  for (;;) {
    const status s = notify(peer, kind, counter);
    if (s == status::ok) return {};
    if (s != status::again) return fail(s, "notification to rank " + std::to_string(peer));
    if (auto r = idle(until); !r) return r;
  }
}

template <provider P>
status communicator<P>::notify(int peer, detail::notify_kind kind, std::uint64_t counter) {
  using detail::token_kind;
  const token_kind tk = kind == detail::notify_kind::credit    ? token_kind::credit
                        : kind == detail::notify_kind::barrier ? token_kind::barrier
                                                               : token_kind::abort;
  const status s =
      mesh_.notify(peer, detail::encode(opts_.tag, kind, rank(), counter), detail::make_token(opts_.tag, tk, peer, 0));
  if (s == status::ok) {
    ++live_.outstanding;
    if (tk == token_kind::barrier) ++live_.awaited;
  }
  return s;
}

template <provider P>
bool communicator<P>::send_credits(detail::credits which) {
  bool any = false;
  for (int p = 0; p < size() && !live_.failure; ++p) {
    detail::channel& ch = channels_[p];
    if (!ch.owes_credit(which)) continue;
    const status s = notify(p, detail::notify_kind::credit, ch.released);
    if (s == status::again) break;  // retried on the next progress()
    if (s != status::ok) {
      (void)fail(s, "returning credits to rank " + std::to_string(p));
      return true;
    }
    ch.credited = ch.released;
    any = true;
  }
  return any;
}

template <provider P>
status communicator<P>::start_probe(int p) {
  const status s = mesh_.flush(p, detail::make_token(opts_.tag, detail::token_kind::probe, p, 0));
  if (s == status::ok) {
    channels_[p].probing = true;
    ++live_.outstanding;
    ++live_.probes_in_flight;
  }
  return s;
}

template <provider P>
void communicator<P>::probe() {
  live_.last_probe = clock::now();
  for (int p = 0; p < size() && !live_.failure; ++p) {
    if (p == rank() || channels_[p].probing) continue;
    const status s = start_probe(p);
    if (s != status::ok && s != status::again) (void)fail(s, "rank " + std::to_string(p) + " is unreachable");
  }
}

template <provider P>
void communicator<P>::on_local(const completion& c) {
  using detail::token_kind;
  if (!detail::token_has_tag(c.token, opts_.tag)) return;  // not ours
  const token_kind kind = detail::token_kind_of(c.token);
  const int peer = detail::token_peer(c.token);
  if (peer >= size()) return;  // not ours
  --live_.outstanding;
  switch (kind) {
    case token_kind::data:
      channels_[peer].written(detail::token_slot(c.token));
      --live_.awaited;
      break;
    case token_kind::forward:
      channels_[peer].release(detail::token_slot(c.token));
      --live_.awaited;
      break;
    case token_kind::direct: --live_.awaited; break;
    case token_kind::probe:
      channels_[peer].probing = false;
      --live_.probes_in_flight;
      break;
    case token_kind::abort: --live_.aborts_in_flight; return;  // best effort
    case token_kind::barrier: --live_.awaited; break;
    case token_kind::credit: break;
  }
  if (c.status != status::ok && !live_.closing)
    (void)fail(c.status, std::string(kind == token_kind::probe ? "probe of" : "operation to") + " rank " +
                             std::to_string(peer) + " failed (" + std::string(to_string(c.status)) + ")");
}

template <provider P>
void communicator<P>::on_notification(const completion& c) {
  const detail::notification n = detail::decode(c.imm);
  if (n.tag != opts_.tag || n.source >= size() || n.source == rank()) return;  // not from a rank of this job
  detail::channel& ch = channels_[n.source];
  switch (n.kind) {
    case detail::notify_kind::data:
      if (!ch.on_data(n.counter, c.bytes, opts_.chunk_bytes))
        (void)fail(status::provider_error, "rank " + std::to_string(n.source) + " broke the chunk protocol");
      break;
    case detail::notify_kind::credit: ch.on_credit(n.counter); break;
    case detail::notify_kind::barrier:
      if (n.counter < 32) ++ch.barrier_seen[n.counter];
      break;
    case detail::notify_kind::abort:
      if (!live_.failure) live_.failure = detail::liveness::aborted_by(rank(), n.source);
      break;
  }
}

}  // namespace fabrix::coll
