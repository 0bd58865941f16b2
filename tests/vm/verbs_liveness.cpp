// verbs on rxe0, run in the vm/conformance-verbs boot (FABRIX_VM_ALSO):
// recv()s waiting on a queue pair whose peer is killed end with
// peer_unreachable, through the bootstrap and through rdma_cm. RC has no
// keepalive, and a queue pair that only receives never sends: through the
// bootstrap only the provider's liveness probes (FABRIX_VERBS_PROBE_MS,
// providers/verbs/README.md) find the dead peer (with probes off this
// waits forever). A live peer that stays silent longer than the probe
// period must not be declared dead.
#include "providers.hpp"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>

using fabrix::access;
using fabrix::completion;
using fabrix::opcode;
using fabrix::status;

TEST_CASE("verbs: recvs on a killed peer end with peer_unreachable; a silent live peer is not dead") {
  for (const char* method : {"bootstrap", "rdma_cm"}) {
    CAPTURE(method);
    ::setenv("FABRIX_VERBS_CONNECT", method, 1);
    fxt::with_ranks<fxt::static_provider>(
        2,
        [method](fxt::rank_env<fxt::static_provider>& env) {
          std::vector<std::byte> in(4 * 64), out(64);
          auto mi = env.reg(in, access::local);
          auto mo = env.reg(out, access::local);
          env.boot.barrier().value();
          if (env.rank == 1) {
            env.serve_for(std::chrono::milliseconds(2500));  // silent for 2.5 probe periods
            env.complete_ok(env.qps[0].send(mo.slice(0, 8), 2), 2);
            env.boot.barrier().value();  // rank 0 has posted four more recvs
            ::kill(::getpid(), SIGKILL);
          }
          // A live peer that says nothing for a while, then sends: probed, not failed.
          FX_CHECK_STATUS(env.qps[1].recv(mi.slice(0, 64), 1), status::ok);
          completion c[8];
          for (int got = 0; got == 0;) {
            FX_CHECK(env.dom.wait(std::chrono::milliseconds::max()) == status::ok);
            const std::size_t n = env.dom.poll(c);
            for (std::size_t i = 0; i < n; ++i, ++got) {
              FX_CHECK(c[i].token == 1);
              FX_CHECK(c[i].status == status::ok);
              FX_CHECK(c[i].peer == 1);
            }
          }
          // Four recvs waiting when the peer is killed.
          for (int i = 0; i < 4; ++i) FX_CHECK_STATUS(env.qps[1].recv(mi.slice(i * 64, 64), 10 + i), status::ok);
          env.boot.barrier().value();
          const auto t0 = std::chrono::steady_clock::now();
          for (int got = 0; got < 4;) {
            FX_CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20));
            (void)env.dom.wait(std::chrono::milliseconds(500));
            const std::size_t n = env.dom.poll(c);
            for (std::size_t i = 0; i < n; ++i, ++got) {
              FX_CHECK(c[i].op == opcode::recv);
              FX_CHECK(c[i].token == static_cast<std::uint64_t>(10 + got));
              FX_CHECK(c[i].status == status::peer_unreachable);
              FX_CHECK(c[i].peer == 1);
            }
          }
          std::printf("verbs_liveness (%s): 4 recvs ended with peer_unreachable %.2f s after the kill\n", method,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
          FX_CHECK_STATUS(env.qps[1].recv(mi.slice(0, 64), 20), status::peer_unreachable);
        },
        std::chrono::seconds(60), [](int rank) { return rank == 1 ? fxt::ending::killed : fxt::ending::exit_ok; });
  }
  ::unsetenv("FABRIX_VERBS_CONNECT");
}
