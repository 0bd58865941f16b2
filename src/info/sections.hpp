// The sections of fabrix-info's report, each built from what this machine
// and environment say now. Building one opens (and closes) provider domains
// and reads sysfs and the environment; nothing else is touched, no socket is
// opened and no bootstrap is started. Single-threaded.
#pragma once

#include "value.hpp"

namespace fabrix::info {

value build_section();         // version, what this build has
value providers_section();     // each provider opened with default options
value rdma_devices_section();  // RDMA devices, ports, GIDs (verbs builds)
value gpus_section();          // GPUs on PCI, the CUDA runtime, GPU-NIC distance
value bootstrap_section();     // which bootstrap engine from_env() would run
value environment_section();   // every FABRIX_* variable, and unknown ones

}  // namespace fabrix::info
