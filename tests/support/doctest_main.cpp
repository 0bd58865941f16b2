// doctest's implementation and its main(), compiled once per build for
// every test executable that has no main() of its own (doctest_main_dep).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
