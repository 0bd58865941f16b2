// Node identity (process_identity.hpp): what makes two processes the same
// node. The cases that need new namespaces run in forked children (unshare
// changes the calling process); they are a meson test of their own, which
// exits 77 (skipped) when this process may not create namespaces.
#include <doctest/doctest.h>

#include <fabrix/detail/process_identity.hpp>

#include "../support/scoped_env.hpp"
#include "child_process.hpp"

#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace fd = fabrix::detail;

namespace {

// Set by the namespace case when unshare is refused for want of privilege.
const char* skipped_because = nullptr;

constexpr int child_skipped = 77;

// In a child: enter new namespaces of `flags`, or report why not.
int enter(int flags, const char* what) {
  if (::unshare(flags) == 0) return 0;
  const int e = errno;
  std::fprintf(stderr, "child: unshare(%s): %s\n", what, std::strerror(e));
  return e == EPERM ? child_skipped : 2;
}

std::string text_of(const char* link) { return fd::namespace_of(link); }

}  // namespace

TEST_CASE("node identity: one process is one node, and the node names its host and namespaces") {
  const fxt::scoped_env keep("FABRIX_NODE_ID");  // restored as it was (the run may set it)
  ::unsetenv("FABRIX_NODE_ID");
  const std::uint64_t a = fd::node_id();
  CHECK(a != 0);
  CHECK(fd::node_id() == a);
  CHECK(fd::self_identity().node == a);
  const std::string where = fd::node_description();
  char host[256] = {};
  REQUIRE(::gethostname(host, sizeof(host) - 1) == 0);
  CHECK_MESSAGE(where.find(std::string("host ") + host) != std::string::npos, where);
  CHECK_MESSAGE(where.find(text_of("/proc/self/ns/net")) != std::string::npos, where);
  CHECK_MESSAGE(where.find(text_of("/proc/self/ns/pid")) != std::string::npos, where);
  CHECK(text_of("/proc/self/ns/net").rfind("net:[", 0) == 0);

  // A forked child is the same node.
  const pid_t child = fxt_child::spawn([a] { return fd::node_id() == a ? 0 : 1; });
  CHECK(fxt_child::reap(child, std::chrono::seconds(10)) == 0);
}

TEST_CASE("node identity: FABRIX_NODE_ID replaces host name and network namespace") {
  const fxt::scoped_env keep("FABRIX_NODE_ID");  // restored as it was (the run may set it)
  ::unsetenv("FABRIX_NODE_ID");
  const std::uint64_t plain = fd::node_id();
  ::setenv("FABRIX_NODE_ID", "rack1-node7", 1);
  const std::uint64_t seven = fd::node_id();
  CHECK(seven != plain);
  CHECK(fd::node_description().find("FABRIX_NODE_ID=rack1-node7") != std::string::npos);
  CHECK(fd::node_description().find("host ") == std::string::npos);
  CHECK(fd::self_identity().node == seven);
  ::setenv("FABRIX_NODE_ID", "rack1-node8", 1);
  CHECK(fd::node_id() != seven);
  CHECK(fd::node_id() != plain);
  ::setenv("FABRIX_NODE_ID", "rack1-node7", 1);
  CHECK(fd::node_id() == seven);
  ::setenv("FABRIX_NODE_ID", "", 1);  // empty: as if unset
  CHECK(fd::node_id() == plain);
  ::unsetenv("FABRIX_NODE_ID");
  CHECK(fd::node_id() == plain);
}

TEST_CASE("node identity: another host name, network namespace or pid namespace is another node") {
  const fxt::scoped_env keep("FABRIX_NODE_ID");  // restored as it was (the run may set it)
  ::unsetenv("FABRIX_NODE_ID");
  const std::uint64_t here = fd::node_id();
  ::setenv("FABRIX_NODE_ID", "joined", 1);
  const std::uint64_t joined_here = fd::node_id();
  ::unsetenv("FABRIX_NODE_ID");
  char host[256] = {};
  REQUIRE(::gethostname(host, sizeof(host) - 1) == 0);
  const std::string my_host = host;

  // A new UTS namespace with another host name: another node; with this
  // process's host name again: this node (the name counts, not the
  // namespace); FABRIX_NODE_ID set alike on both sides: one node again.
  const pid_t uts = fxt_child::spawn([&] {
    if (int rc = enter(CLONE_NEWUTS, "CLONE_NEWUTS")) return rc;
    const std::string other = my_host + "-fx-other";
    CHILD_CHECK(0, ::sethostname(other.data(), other.size()) == 0);
    CHILD_CHECK(0, fd::node_id() != here);
    CHILD_CHECK(0, fd::self_identity().node != here);
    CHILD_CHECK(0, fd::node_description().find("host " + other) != std::string::npos);
    ::setenv("FABRIX_NODE_ID", "joined", 1);
    CHILD_CHECK(0, fd::node_id() == joined_here);
    ::unsetenv("FABRIX_NODE_ID");
    CHILD_CHECK(0, ::sethostname(my_host.data(), my_host.size()) == 0);
    CHILD_CHECK(0, fd::node_id() == here);
    return 0;
  });
  const int uts_rc = fxt_child::reap(uts, std::chrono::seconds(10));

  // A new network namespace, same host name: another node.
  const pid_t net = fxt_child::spawn([&] {
    const std::string before = text_of("/proc/self/ns/net");
    if (int rc = enter(CLONE_NEWNET, "CLONE_NEWNET")) return rc;
    CHILD_CHECK(0, text_of("/proc/self/ns/net") != before);
    CHILD_CHECK(0, fd::node_id() != here);
    ::setenv("FABRIX_NODE_ID", "joined", 1);
    CHILD_CHECK(0, fd::node_id() == joined_here);
    return 0;
  });
  const int net_rc = fxt_child::reap(net, std::chrono::seconds(10));

  // A new pid namespace (its first process is the child's child): another
  // node even with the same FABRIX_NODE_ID, since its pids cannot be looked
  // up in this /proc.
  const pid_t pid = fxt_child::spawn([&] {
    if (int rc = enter(CLONE_NEWPID, "CLONE_NEWPID")) return rc;
    const pid_t inner = ::fork();
    CHILD_CHECK(0, inner >= 0);
    if (inner == 0) {
      ::setenv("FABRIX_NODE_ID", "joined", 1);
      const bool ok = ::getpid() == 1 && fd::node_id() != joined_here;
      std::_Exit(ok ? 0 : 1);
    }
    int st = 0;
    CHILD_CHECK(0, ::waitpid(inner, &st, 0) == inner);
    CHILD_CHECK(0, WIFEXITED(st) && WEXITSTATUS(st) == 0);
    return 0;
  });
  const int pid_rc = fxt_child::reap(pid, std::chrono::seconds(10));

  const int rcs[] = {uts_rc, net_rc, pid_rc};
  bool skipped = false;
  for (int rc : rcs) skipped = skipped || rc == child_skipped;
  if (skipped) {
    skipped_because = "unshare() was refused (EPERM): this process may not create namespaces (needs CAP_SYS_ADMIN)";
    MESSAGE(std::string(skipped_because));
    for (int rc : rcs) CHECK((rc == 0 || rc == child_skipped));
    return;
  }
  CHECK(uts_rc == 0);
  CHECK(net_rc == 0);
  CHECK(pid_rc == 0);
}

// doctest's exit code, or 77 (skipped) when every case that ran passed but
// the namespace case could not run.
int main(int argc, char** argv) {
  doctest::Context ctx(argc, argv);
  const int rc = ctx.run();
  if (ctx.shouldExit() || rc != 0) return rc;
  if (skipped_because) {
    std::fprintf(stderr, "skipped: %s\n", skipped_because);
    return 77;
  }
  return 0;
}
