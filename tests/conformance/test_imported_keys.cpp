// Imported remote keys (queue_pair::import, remote_key.hpp) on every
// provider: bytes moved through key slices by writes, reads,
// write_with_imm, atomics and unsignaled batches land where they were aimed;
// import refuses forged and misdirected buffers; each operation still
// checks its range; a released key is refused; keys stay usable when more
// regions are imported than a provider caches keys for (64), and the
// remote_buffer path through more regions than that moves every byte.
#include "providers.hpp"

#include <cstdint>
#include <cstring>

using fabrix::access;
using fabrix::op_options;
using fabrix::status;

namespace {
constexpr std::size_t key_block = 64 * 1024, piece = 4096, pieces = key_block / piece;
constexpr std::size_t regions = 80, each = 256;
constexpr std::uint32_t imported_done_imm = 77;
}  // namespace

TEST_CASE_TEMPLATE("conformance: imported remote keys move bytes and keep every check", P, FX_PROVIDERS) {
  fxt::with_ranks<P>(2, [](fxt::rank_env<P>& env) {
    std::vector<std::byte> buf(key_block + 64), src(key_block), back(key_block);
    auto mr = env.reg(buf);
    auto ms = env.reg(src, access::local);
    auto mb = env.reg(back, access::local);
    auto peers = env.share(mr);
    std::vector<std::vector<std::byte>> small(regions, std::vector<std::byte>(2 * each));  // imported | buffer path
    std::vector<fabrix::memory_region<P>> msmall;
    for (auto& t : small) msmall.push_back(env.reg(t));
    const auto speers = env.share_all(msmall);
    if (env.rank == 0) {
      auto& qp = env.qps[1];
      auto imported = qp.import(peers[1]);
      FX_CHECK(imported.has_value());
      const fabrix::remote_key key = *imported;
      FX_CHECK(key.length == buf.size());

      // A write, then a read back, through the key.
      fxt::fill(src.data(), key_block, 7);
      env.complete_ok(qp.write(ms.slice(0, key_block), key.slice(0, key_block), 1), 1);
      env.complete_ok(qp.read(mb.slice(0, key_block), key.slice(0, key_block), 2), 2);
      FX_CHECK(fxt::first_mismatch(back.data(), key_block, 7) == key_block);

      // Atomics on an 8-byte word past the block.
      if constexpr (P::caps.atomics) {
        env.complete_ok(qp.fetch_add(mb.slice(0, 8), key.slice(key_block, 8), 5, 3), 3);
        std::uint64_t old = 1;
        std::memcpy(&old, back.data(), 8);
        FX_CHECK(old == 0);
        env.complete_ok(qp.compare_swap(mb.slice(8, 8), key.slice(key_block, 8), 5, 11, 4), 4);
        std::memcpy(&old, back.data() + 8, 8);
        FX_CHECK(old == 5);
      }

      // An unsignaled batch through the key, then one flush; counted.
      const std::uint64_t before = qp.finished();
      for (std::size_t i = 0; i < pieces; ++i) fxt::fill(src.data() + i * piece, piece, 30 + i);
      for (std::size_t i = 0; i < pieces; ++i)
        FX_CHECK_STATUS(
            qp.write(ms.slice(i * piece, piece), key.slice(i * piece, piece), 100 + i, op_options::unsignaled),
            status::ok);
      env.complete_ok(qp.flush(5), 5);
      FX_CHECK(qp.finished() - before == pieces);

      // Each operation still checks its range; import checks the seal,
      // the owner and the provider.
      FX_CHECK_STATUS(qp.write(ms.slice(0, 8), key.slice(buf.size() - 4, 8), 6), status::out_of_range);
      auto forged = peers[1];
      forged.length += 4096;  // a longer region than the peer sealed
      FX_CHECK(!qp.import(forged).has_value());
      FX_CHECK(qp.import(forged).error().code == status::invalid_argument);
      forged = peers[1];
      forged.key[0] ^= std::byte{1};
      FX_CHECK(!qp.import(forged).has_value());
      FX_CHECK(!qp.import(peers[0]).has_value());  // this rank's own region, not the peer's

      // Released: refused, never used.
      FX_CHECK_STATUS(qp.release(key), status::ok);
      FX_CHECK_STATUS(qp.write(ms.slice(0, 8), key.slice(0, 8), 7), status::invalid_argument);
      FX_CHECK_STATUS(qp.release(key), status::invalid_argument);

      // More imported regions than a key cache keeps, all in flight at once.
      std::vector<fabrix::remote_key> keys;
      for (std::size_t i = 0; i < regions; ++i) {
        auto k = qp.import(speers[i][1]);
        FX_CHECK(k.has_value());
        keys.push_back(*k);
      }
      for (std::size_t i = 0; i < regions; ++i) fxt::fill(src.data() + i * each, each, 500 + i);
      for (std::size_t i = 0; i < regions; ++i)
        FX_CHECK_STATUS(qp.write(ms.slice(i * each, each), keys[i].slice(0, each), 1000 + i), status::ok);
      for (std::size_t i = 0; i < regions; ++i) FX_CHECK(env.next_token(1000 + i).status == status::ok);
      for (const auto& k : keys) FX_CHECK_STATUS(qp.release(k), status::ok);

      // The remote_buffer path through the same regions, twice: more than
      // the key cache keeps (64 per queue pair, every provider), so entries
      // are dropped and verified again; the second pass's bytes must win.
      // A forged copy of a dropped region's buffer is still refused.
      for (std::size_t pass = 0; pass < 2; ++pass) {
        for (std::size_t i = 0; i < regions; ++i) fxt::fill(src.data() + i * each, each, 600 + pass * 100 + i);
        for (std::size_t i = 0; i < regions; ++i)
          FX_CHECK_STATUS(qp.write(ms.slice(i * each, each), speers[i][1].slice(each, each), 2000 + i), status::ok);
        for (std::size_t i = 0; i < regions; ++i) FX_CHECK(env.next_token(2000 + i).status == status::ok);
      }
      fabrix::remote_buffer dropped = speers[0][1];
      dropped.key[0] ^= std::byte{1};
      FX_CHECK_STATUS(qp.write(ms.slice(0, each), dropped.slice(0, each), 2999), status::invalid_argument);

      // A fresh import of the first region carries the notification.
      auto again = qp.import(peers[1]);
      FX_CHECK(again.has_value());
      fxt::fill(src.data(), 8, 90);
      env.complete_ok(qp.write_with_imm(ms.slice(0, 8), again->slice(key_block + 16, 8), imported_done_imm, 8), 8);
    } else {
      FX_CHECK(env.next_notify().imm == imported_done_imm);
      for (std::size_t i = 0; i < pieces; ++i)
        FX_CHECK(fxt::first_mismatch(buf.data() + i * piece, piece, 30 + i) == piece);
      if constexpr (P::caps.atomics) {
        std::uint64_t word = 0;
        std::memcpy(&word, buf.data() + key_block, 8);
        FX_CHECK(word == 11);
      }
      FX_CHECK(fxt::first_mismatch(buf.data() + key_block + 16, 8, 90) == 8);
      for (std::size_t i = 0; i < regions; ++i) {
        FX_CHECK(fxt::first_mismatch(small[i].data(), each, 500 + i) == each);
        FX_CHECK(fxt::first_mismatch(small[i].data() + each, each, 700 + i) == each);
      }
    }
    env.boot.barrier().value();
  });
}
