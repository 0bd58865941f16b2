// The UCX provider exported under a name of its own, "ucx-renamed":
// libfabrix-ucx-renamed.so, a provider fabrix has no built-in number for.
// Its remote buffers carry provider_id_of("ucx-renamed") (a hashed number
// that remote_buffer::decode accepts only once the loader has registered the
// name), so the conformance suite through it exercises the open provider set
// end to end: name, number, registry, exchange of remote buffers.
#include <fabrix/plugin_export.hpp>
#include <fabrix/ucx.hpp>

FABRIX_EXPORT_PROVIDER_AS(fabrix::ucx::provider, "ucx-renamed", 50)
