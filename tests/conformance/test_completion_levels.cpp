// The one meaning of a completion (issue: core contract v2), on every
// provider: at completion_level::local a write's source may be reused at
// once; at completion_level::delivered (per operation or per queue pair) its
// bytes are also visible at the target when it completes; a flush makes
// everything before it visible; an operation after fence() starts only after
// everything before it is complete at the target; unsignaled operations
// give no completion unless they fail and are counted in finished().
//
// "Visible at the target" is checked through a side channel outside fabrix:
// a shared anonymous mapping made before the ranks fork. The initiator sets
// a word there right after the completion; the target, polling its domain
// meanwhile (transports that need target progress), checks its bytes as soon
// as it sees the word.
#include "providers.hpp"

#include <array>
#include <atomic>
#include <cstdint>
#include <optional>

using fabrix::access;
using fabrix::completion;
using fabrix::op_options;
using fabrix::opcode;
using fabrix::status;

namespace {

// Words shared by the ranks of one test (fxt::shared_page: made before the
// ranks start, by forked ranks and by a launcher's alike).
class side_channel {
 public:
  side_channel() {
    REQUIRE(page_.data() != nullptr);
    words_ = static_cast<std::atomic<std::uint64_t>*>(page_.data());
  }
  side_channel(const side_channel&) = delete;
  side_channel& operator=(const side_channel&) = delete;

  void set(int i, std::uint64_t v) { words_[i].store(v, std::memory_order_release); }
  std::uint64_t get(int i) const { return words_[i].load(std::memory_order_acquire); }

  // Polls env's domain until word i holds v.
  template <class P>
  void await(fxt::rank_env<P>& env, int i, std::uint64_t v) const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    completion buf[32];
    while (get(i) != v) {
      const std::size_t n = env.dom.poll(buf);
      env.backlog.insert(env.backlog.end(), buf, buf + n);
      if (std::chrono::steady_clock::now() > deadline)
        ::fxt::rank_fail("side-channel word did not arrive", __FILE__, __LINE__, "word " + std::to_string(i));
    }
  }

 private:
  fxt::shared_page page_;
  std::atomic<std::uint64_t>* words_ = nullptr;
};

// Posts the whole batch, polling through back-pressure.
template <class P>
void post_all(fxt::rank_env<P>& env, fabrix::queue_pair<P>& qp, std::span<const fabrix::operation> ops) {
  std::size_t done = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (done < ops.size()) {
    const auto r = qp.post(ops.subspan(done));
    done += r.posted;
    if (r.status == status::again) {
      env.serve_for(std::chrono::milliseconds(1));
      FX_CHECK(std::chrono::steady_clock::now() < deadline);
      continue;
    }
    FX_CHECK_STATUS(r.status, status::ok);
  }
}

constexpr std::size_t block = 64 * 1024;

}  // namespace

TEST_CASE_TEMPLATE("conformance: completion levels keep their promise", P, FX_PROVIDERS) {
  side_channel side;
  fxt::with_ranks<P>(2, [&side](fxt::rank_env<P>& env) {
    std::vector<std::byte> buf(4 * block), src(block);
    auto mr = env.reg(buf);
    auto ms = env.reg(src, access::local);
    auto peers = env.share(mr);
    if (env.rank == 0) {
      auto& qp = env.qps[1];
      // local: the source is reused as soon as the write completes; the
      // target still gets what the source held when it was posted.
      fxt::fill(src.data(), block, 1);
      env.complete_ok(qp.write(ms.slice(0, block), peers[1].slice(0, block), 1), 1);
      fxt::fill(src.data(), block, 99);
      env.complete_ok(qp.flush(2), 2);
      side.set(0, 1);
      // delivered, per operation: visible when it completes, no flush.
      fxt::fill(src.data(), block, 3);
      env.complete_ok(qp.write(ms.slice(0, block), peers[1].slice(block, block), 3, op_options::delivered), 3);
      side.set(1, 1);
      // delivered as the queue pair's default, for write and write_with_imm.
      qp.set_default_options(op_options::delivered);
      fxt::fill(src.data(), 4096, 4);
      env.complete_ok(qp.write(ms.slice(0, 4096), peers[1].slice(2 * block, 4096), 4), 4);
      side.set(2, 1);
      fxt::fill(src.data(), 4096, 5);
      env.complete_ok(qp.write_with_imm(ms.slice(0, 4096), peers[1].slice(2 * block + 4096, 4096), 55, 5), 5);
      side.set(3, 1);
      qp.set_default_options(op_options::none);
      // flush: everything before it is visible once it completes.
      for (std::uint64_t i = 0; i < 16; ++i) {
        fxt::fill(buf.data() + 3 * block + i * 4096, 4096, 60 + i);
        FX_CHECK_STATUS(
            qp.write(mr.slice(3 * block + i * 4096, 4096), peers[1].slice(3 * block + i * 4096, 4096), 100 + i),
            status::ok);
      }
      env.complete_ok(qp.flush(6), 6);
      side.set(4, 1);
      for (std::uint64_t i = 0; i < 16; ++i) FX_CHECK(env.next_token(100 + i).status == status::ok);
      side.await(env, 5, 1);  // rank 1 has checked everything
    } else {
      side.await(env, 0, 1);
      FX_CHECK(fxt::first_mismatch(buf.data(), block, 1) == block);
      side.await(env, 1, 1);
      FX_CHECK(fxt::first_mismatch(buf.data() + block, block, 3) == block);
      side.await(env, 2, 1);
      FX_CHECK(fxt::first_mismatch(buf.data() + 2 * block, 4096, 4) == 4096);
      side.await(env, 3, 1);
      FX_CHECK(fxt::first_mismatch(buf.data() + 2 * block + 4096, 4096, 5) == 4096);
      side.await(env, 4, 1);
      for (std::uint64_t i = 0; i < 16; ++i)
        FX_CHECK(fxt::first_mismatch(buf.data() + 3 * block + i * 4096, 4096, 60 + i) == 4096);
      FX_CHECK(env.next_notify().imm == 55);
      side.set(5, 1);
    }
    env.boot.barrier().value();
  });
}

TEST_CASE_TEMPLATE("conformance: fence orders later operations after earlier ones", P, FX_PROVIDERS) {
  side_channel side;
  fxt::with_ranks<P>(2, [&side](fxt::rank_env<P>& env) {
    std::vector<std::byte> buf(4 * block + 64), back(block);
    auto mr = env.reg(buf);
    auto mb = env.reg(back, access::local);
    auto peers = env.share(mr);
    if (env.rank == 0) {
      auto& qp = env.qps[1];
      // A flag written after a fence is never seen before the data.
      for (std::uint64_t round = 1; round <= 3; ++round) {
        fxt::fill(buf.data(), 4 * block, 10 + round);
        std::memcpy(buf.data() + 4 * block, &round, 8);
        FX_CHECK_STATUS(qp.write(mr.slice(0, 4 * block), peers[1].slice(0, 4 * block), 1), status::ok);
        qp.fence();
        FX_CHECK_STATUS(qp.write(mr.slice(4 * block, 8), peers[1].slice(4 * block, 8), 2), status::ok);
        FX_CHECK(env.next_token(1).status == status::ok);
        FX_CHECK(env.next_token(2).status == status::ok);
        side.await(env, 0, round);  // rank 1 saw the flag and checked the data
      }
      // A read after a fence returns what the write before it wrote.
      fxt::fill(buf.data(), block, 20);
      FX_CHECK_STATUS(qp.write(mr.slice(0, block), peers[1].slice(0, block), 3), status::ok);
      qp.fence();
      FX_CHECK_STATUS(qp.read(mb.slice(0, block), peers[1].slice(0, block), 4), status::ok);
      FX_CHECK(env.next_token(3).status == status::ok);
      FX_CHECK(env.next_token(4).status == status::ok);
      FX_CHECK(fxt::first_mismatch(back.data(), block, 20) == block);
      side.set(1, 1);
    } else {
      for (std::uint64_t round = 1; round <= 3; ++round) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        auto* flag = reinterpret_cast<const std::uint64_t*>(buf.data() + 4 * block);
        completion polled[32];
        while (__atomic_load_n(flag, __ATOMIC_ACQUIRE) != round) {  // the data is read after the flag
          const std::size_t n = env.dom.poll(polled);
          env.backlog.insert(env.backlog.end(), polled, polled + n);
          FX_CHECK(std::chrono::steady_clock::now() < deadline);
        }
        FX_CHECK(fxt::first_mismatch(buf.data(), 4 * block, 10 + round) == 4 * block);
        side.set(0, round);
      }
      side.await(env, 1, 1);
    }
    env.boot.barrier().value();
  });
}

TEST_CASE_TEMPLATE("conformance: unsignaled operations complete nothing on success and are counted", P, FX_PROVIDERS) {
  side_channel side;
  fxt::with_ranks<P>(2, [&side](fxt::rank_env<P>& env) {
    std::vector<std::byte> buf(128 * 64 + 64), src(128 * 64 + 64);
    auto mr = env.reg(buf);
    auto ms = env.reg(src);
    auto peers = env.share(mr);
    if (env.rank == 0) {
      auto& qp = env.qps[1];
      const std::uint64_t before = qp.finished();
      // Per operation, posted as one batch.
      std::vector<fabrix::operation> ops;
      for (std::uint64_t i = 0; i < 64; ++i) {
        fxt::fill(src.data() + i * 64, 64, 200 + i);
        ops.push_back(
            fabrix::op::write(ms.slice(i * 64, 64), peers[1].slice(i * 64, 64), 1000 + i, op_options::unsignaled));
      }
      post_all(env, qp, ops);
      env.complete_ok(qp.flush(1), 1);
      FX_CHECK(qp.finished() - before == 64);
      // As the queue pair's default: writes, atomics and a read; the flush
      // stays signaled.
      qp.set_default_options(op_options::unsignaled);
      for (std::uint64_t i = 64; i < 128; ++i) {
        fxt::fill(src.data() + i * 64, 64, 200 + i);
        FX_CHECK_STATUS(qp.write(ms.slice(i * 64, 64), peers[1].slice(i * 64, 64), 1000 + i), status::ok);
      }
      std::uint64_t atomics = 0;
      if (env.dom.caps().atomics) {
        for (int i = 0; i < 8; ++i)
          FX_CHECK_STATUS(qp.fetch_add(ms.slice(128 * 64 + 8, 8), peers[1].slice(128 * 64, 8), 3, 2000 + i),
                          status::ok);
        atomics = 8;
      }
      env.complete_ok(qp.flush(2), 2);
      FX_CHECK(qp.finished() - before == 128 + atomics);
      qp.set_default_options(op_options::none);
      FX_CHECK_STATUS(qp.read(ms.slice(128 * 64, 8), peers[1].slice(128 * 64, 8), 3), status::ok);
      FX_CHECK(env.next_token(3).status == status::ok);
      std::uint64_t word = 0;
      std::memcpy(&word, src.data() + 128 * 64, 8);
      FX_CHECK(word == 3 * atomics);
      // None of the unsignaled operations gave a completion.
      env.serve_for(std::chrono::milliseconds(50));
      for (const completion& c : env.backlog) FX_CHECK(!(c.token >= 1000 && c.token < 2008));
      FX_CHECK(qp.finished() - before == 128 + atomics);
      side.set(0, 1);
    } else {
      side.await(env, 0, 1);
      for (std::uint64_t i = 0; i < 128; ++i) FX_CHECK(fxt::first_mismatch(buf.data() + i * 64, 64, 200 + i) == 64);
    }
    env.boot.barrier().value();
  });
}

TEST_CASE_TEMPLATE("conformance: an unsignaled operation that fails completes with its error and token", P,
                   FX_PROVIDERS) {
  side_channel side;
  fxt::with_ranks<P>(2, [&side](fxt::rank_env<P>& env) {
    std::vector<std::byte> gone(4096), local(4096);
    auto ml = env.reg(local);
    std::optional<fabrix::memory_region<P>> mg(env.reg(gone));
    auto gone_peers = env.share(*mg);
    if (env.rank == 1) mg.reset();
    env.boot.barrier().value();  // rank 1 has deregistered it
    if (env.rank == 0) {
      auto& qp = env.qps[1];
      const std::uint64_t before = qp.finished();
      fxt::fill(local.data(), 64, 7);
      FX_CHECK_STATUS(qp.write(ml.slice(0, 64), gone_peers[1].slice(0, 64), 77, op_options::unsignaled), status::ok);
      // The failure surfaces as the write's own error completion. Where a
      // write completes locally and the target NIC's refusal fails the
      // connection instead (UCX over RDMA transports; see stale-keys), the
      // flush after it fails or is refused, as for a signaled write.
      const status flushed = qp.flush(78);
      const completion first = env.next(
          [](const completion& c) { return c.op != opcode::remote_write_imm && (c.token == 77 || c.token == 78); });
      FX_CHECK(first.status != status::ok);
      if (first.token == 77) {
        FX_CHECK(first.op == opcode::write);
        if (flushed == status::ok) env.next_token(78);
      } else {
        FX_CHECK(first.op == opcode::flush);
      }
      FX_CHECK(flushed == status::ok || flushed == status::peer_unreachable);
      FX_CHECK(qp.finished() - before == 1);
      side.set(0, 1);
    } else {
      side.await(env, 0, 1);
      for (std::byte b : gone) FX_CHECK(b == std::byte{0});
    }
    env.boot.barrier().value();
  });
}
