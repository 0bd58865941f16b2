// fabrix — one-sided RDMA-style transport over verbs, UCX, libfabric and
// CUDA IPC. This umbrella header is the whole core API; it needs no provider
// headers. Add a provider with its own header, e.g. <fabrix/ucx.hpp>.
#pragma once

#include <fabrix/any_provider.hpp>
#include <fabrix/bootstrap.hpp>
#include <fabrix/capabilities.hpp>
#include <fabrix/completion.hpp>
#include <fabrix/concepts.hpp>
#include <fabrix/connect.hpp>
#include <fabrix/domain.hpp>
#include <fabrix/domain_options.hpp>
#include <fabrix/error.hpp>
#include <fabrix/lazy_mesh.hpp>
#include <fabrix/listener.hpp>
#include <fabrix/local_slice.hpp>
#include <fabrix/memory.hpp>
#include <fabrix/memory_region.hpp>
#include <fabrix/operation.hpp>
#include <fabrix/queue_pair.hpp>
#include <fabrix/remote_buffer.hpp>
#include <fabrix/remote_key.hpp>
#include <fabrix/result.hpp>
#include <fabrix/routed.hpp>
#include <fabrix/status.hpp>
#include <fabrix/task.hpp>
