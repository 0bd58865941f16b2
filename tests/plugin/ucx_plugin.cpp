// The UCX provider built as a plugin, libfabrix-ucx.so: the whole source of
// a provider plugin (tests/plugin/README.md). Built twice (meson.build): at
// this fabrix's ABI version (v2/) and, with FABRIX_TEST_PLUGIN_ABI=1, as a
// plugin built against version 1 of the table would be (v1/).
#include <fabrix/plugin_export.hpp>
#include <fabrix/ucx.hpp>

#ifndef FABRIX_TEST_PLUGIN_ABI
#define FABRIX_TEST_PLUGIN_ABI FABRIX_PROVIDER_ABI_VERSION
#endif

FABRIX_EXPORT_PROVIDER_VERSION(fabrix::ucx::provider, 50, FABRIX_TEST_PLUGIN_ABI)
