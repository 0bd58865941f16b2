// Fuzz targets for every decoder of bytes that come from a peer. Each target
// defines LLVMFuzzerTestOneInput (usable with libFuzzer: tools/fuzz.sh) and
// fabrix_fuzz_seeds() (valid inputs the standalone driver mutates).
// A target aborts on a broken property; sanitizers catch the rest.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

using fuzz_input = std::vector<std::uint8_t>;
std::vector<fuzz_input> fabrix_fuzz_seeds();

#define FUZZ_ASSERT(cond)                                                              \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      std::fprintf(stderr, "%s:%d: property broken: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                    \
    }                                                                                  \
  } while (0)
