// doctest's implementation without a main(), compiled once per build, for
// test executables that write their own main() (doctest_impl_dep).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
