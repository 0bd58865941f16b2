// Runs a fuzz target without libFuzzer (gcc builds, CI): the seeds, then
// mutations of them and random blobs, from a fixed PRNG seed so a failure
// reproduces. Usage: fuzz_X [iterations] [seed]
#include "fuzz.hpp"

#include <random>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

int main(int argc, char** argv) {
  const long iterations = argc > 1 ? std::stol(argv[1]) : 200000;
  std::mt19937_64 rng(argc > 2 ? std::stoull(argv[2]) : 1);
  const auto seeds = fabrix_fuzz_seeds();
  for (const auto& s : seeds) LLVMFuzzerTestOneInput(s.data(), s.size());
  for (long i = 0; i < iterations; ++i) {
    fuzz_input in;
    if (seeds.empty() || rng() % 8 == 0) {
      in.resize(rng() % 256);
      for (auto& b : in) b = static_cast<std::uint8_t>(rng());
    } else {
      in = seeds[rng() % seeds.size()];
      const int edits = 1 + static_cast<int>(rng() % 4);
      for (int e = 0; e < edits; ++e) {
        switch (rng() % 5) {
          case 0:  // flip a bit
            if (!in.empty()) in[rng() % in.size()] ^= static_cast<std::uint8_t>(1u << (rng() % 8));
            break;
          case 1:  // set a byte to an interesting value
            if (!in.empty()) in[rng() % in.size()] = static_cast<std::uint8_t>((rng() % 2) ? 0xff : rng() % 4);
            break;
          case 2:  // truncate
            in.resize(in.empty() ? 0 : rng() % in.size());
            break;
          case 3:  // extend
            for (int k = static_cast<int>(rng() % 16); k > 0; --k) in.push_back(static_cast<std::uint8_t>(rng()));
            break;
          default:  // overwrite a run
            for (std::size_t k = 0, at = in.empty() ? 0 : rng() % in.size(); k < 8 && at + k < in.size(); ++k)
              in[at + k] = static_cast<std::uint8_t>(rng());
        }
      }
    }
    LLVMFuzzerTestOneInput(in.data(), in.size());
  }
  std::printf("%ld inputs, no property broken\n", iterations + static_cast<long>(seeds.size()));
  return 0;
}
