// The staging tests' posting helpers: a staged adapter says again while
// its bounce slots are busy, and a flush says again while a staged
// operation before it runs (cuda/staged.hpp), so a test polls and posts the
// rest. Include after harness.hpp.
#pragma once

#include "harness.hpp"

#include <span>

namespace fxt {

// One round of progress; completions go to the backlog.
template <class P>
void poll_once(rank_env<P>& env) {
  fabrix::completion buf[32];
  const std::size_t n = env.dom.poll(buf);
  env.backlog.insert(env.backlog.end(), buf, buf + n);
}

// Posts a batch, polling whenever the adapter or provider says again.
template <class P>
void post_all(rank_env<P>& env, fabrix::queue_pair<P>& qp, std::span<const fabrix::operation> ops) {
  std::size_t done = 0;
  for (int tries = 0; done < ops.size(); ++tries) {
    FX_CHECK(tries < 1000000);
    const auto r = qp.post(ops.subspan(done));
    done += r.posted;
    if (r.status == fabrix::status::again) {
      poll_once(env);
      continue;
    }
    FX_CHECK_STATUS(r.status, fabrix::status::ok);
  }
}

}  // namespace fxt
