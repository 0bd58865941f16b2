/* fabrix/provider_abi.h — the C ABI of a provider loaded at run time.
 *
 * A provider plugin is a shared object, libfabrix-<name>.so, that exports
 *
 *   const struct fabrix_provider_table* fabrix_provider_entry(uint32_t host_abi_version);
 *
 * fabrix::open("<name>") finds it on FABRIX_PROVIDER_PATH (colon-separated
 * directories), then in fabrix's default directory (<prefix>/<libdir>/fabrix),
 * dlopen()s it and calls the entry with the host's FABRIX_PROVIDER_ABI_VERSION.
 * The entry returns a table of at most that version (a newer plugin answers
 * an older host with the older table, which is a prefix of its own), or NULL
 * when it cannot serve that host. Nothing of C++ crosses this boundary: plain
 * C types only, as in NCCL's net plugin. <fabrix/plugin_export.hpp> builds
 * the table from any static (header-only) fabrix provider.
 *
 * Versioning. Tables only grow: a version adds function pointers at the end
 * and never changes or removes an earlier field or struct. The host accepts a
 * table whose `size` covers at least every version-1 field and whose
 * abi_version is 1..FABRIX_PROVIDER_ABI_VERSION; every version-1 function
 * must be non-NULL. A later field is absent when it lies past `size`, or is
 * NULL: then allocate_memory answers FABRIX_STATUS_UNSUPPORTED (with a
 * message) and check_host_memory answers FABRIX_STATUS_OK.
 *   version 1: everything up to set_default_options.
 *   version 2: allocate_memory, check_host_memory.
 * The value structs below are version 1's and are never changed; a version
 * that needs more would add new functions taking new structs.
 *
 * Threading: as for the C++ providers, one thread at a time per domain and
 * everything made from it (endpoints, regions); different domains may be
 * used from different threads at once. fabrix_provider_entry may be called
 * more than once, from any thread, and returns the same table each time.
 *
 * Lifetime: the host closes (deregister_memory, disconnect) every region and
 * endpoint of a domain before it closes the domain. A plugin is never
 * unloaded (no dlclose: running a library's destructors while another
 * library's atexit handlers or threads still reach into it is a known source
 * of crashes at exit), so the table and its strings live as long as the
 * process. Data the plugin hands back through out-parameters is copied by the
 * host before the call returns, except: a region's descriptor, which is the
 * plugin's and stays valid until that region is deregistered.
 *
 * Ownership: nothing allocated by one side is freed by the other. Handles
 * (domain, endpoint, region) are the plugin's; the host gives them back only
 * through the close functions. Buffers passed in (addresses, operations,
 * completion arrays, error structs) are the host's and are used only during
 * the call, except the memory of registered regions and the buffers of
 * posted operations, which the host keeps valid as fabrix's C++ API says
 * (until the operation completes / the region is deregistered).
 *
 * Errors: functions that return int32_t return a FABRIX_STATUS_* value.
 * Control-path functions take a `struct fabrix_error*` (never NULL, zeroed by
 * the host) and, when they return an error, fill it: status = the returned
 * value, native_code = the library's own code (0 when none), message = a
 * NUL-terminated text (truncated to fit). Out-parameters are written only on
 * success. Data-path functions (post, poll, wait, release_key) return a
 * status only. A plugin written in C++ must not let an exception leave any
 * function of the table.
 *
 * Value types. local_slice, remote_buffer and completion have exactly the
 * layout of fabrix::local_slice, fabrix::remote_buffer and fabrix::completion
 * (fabrix checks this at compile time on both sides), so arrays of them cross
 * without copies. A remote_slice names either a remote_buffer (buffer
 * non-NULL) or a key imported on the same endpoint (buffer NULL, key_ref
 * issued by import_key): the host has already checked its range, its rights
 * and that this endpoint imported it; key_address/length/rights/provider/
 * kind/device repeat what the key was imported from.
 *
 * Everything a plugin is given has been validated by fabrix's core as for a
 * header-only provider (fabrix/concepts.hpp states that contract): ranges,
 * rights, alignment, the provider and domain of every local slice.
 */
#ifndef FABRIX_PROVIDER_ABI_H
#define FABRIX_PROVIDER_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FABRIX_PROVIDER_ABI_VERSION 2
#define FABRIX_PROVIDER_ENTRY_SYMBOL "fabrix_provider_entry"

/* fabrix::status, by number. */
#define FABRIX_STATUS_OK 0
#define FABRIX_STATUS_IN_PROGRESS 1
#define FABRIX_STATUS_AGAIN 2
#define FABRIX_STATUS_INVALID_ARGUMENT 3
#define FABRIX_STATUS_ACCESS_DENIED 4
#define FABRIX_STATUS_OUT_OF_RANGE 5
#define FABRIX_STATUS_PEER_UNREACHABLE 6
#define FABRIX_STATUS_TIMED_OUT 7
#define FABRIX_STATUS_UNSUPPORTED 8
#define FABRIX_STATUS_TRUNCATED 9
#define FABRIX_STATUS_CANCELED 10
#define FABRIX_STATUS_NO_MEMORY 11
#define FABRIX_STATUS_PROVIDER_ERROR 12
#define FABRIX_STATUS_STALE_KEY 13

/* fabrix::opcode */
#define FABRIX_OP_WRITE 0
#define FABRIX_OP_READ 1
#define FABRIX_OP_WRITE_WITH_IMM 2
#define FABRIX_OP_FETCH_ADD 3
#define FABRIX_OP_COMPARE_SWAP 4
#define FABRIX_OP_SEND 5
#define FABRIX_OP_RECV 6
#define FABRIX_OP_FLUSH 7
#define FABRIX_OP_REMOTE_WRITE_IMM 8

/* fabrix::op_options bits */
#define FABRIX_OPTION_UNSIGNALED 1
#define FABRIX_OPTION_DELIVERED 2
#define FABRIX_OPTION_FENCE 4

/* fabrix::access bits (0: local access only) */
#define FABRIX_ACCESS_REMOTE_READ 1
#define FABRIX_ACCESS_REMOTE_WRITE 2
#define FABRIX_ACCESS_REMOTE_ATOMIC 4

/* fabrix::memory_kind */
#define FABRIX_MEMORY_HOST 0
#define FABRIX_MEMORY_CUDA_DEVICE 1

/* fabrix::gpu_path */
#define FABRIX_GPU_NONE 0
#define FABRIX_GPU_STAGED 1
#define FABRIX_GPU_DIRECT 2

#define FABRIX_ERROR_MESSAGE_SIZE 256
#define FABRIX_MAX_KEY_SIZE 512

/* Opaque handles, the plugin's. */
typedef struct fabrix_plugin_domain fabrix_plugin_domain;
typedef struct fabrix_plugin_endpoint fabrix_plugin_endpoint;
typedef struct fabrix_plugin_region fabrix_plugin_region;

/* What a failed control-path call says (fabrix::error; the provider name is
 * the table's). */
struct fabrix_error {
  int32_t status;
  int32_t reserved;
  int64_t native_code;
  char message[FABRIX_ERROR_MESSAGE_SIZE];
};

/* fabrix::local_slice: a range of one of this domain's regions. */
struct fabrix_local_slice {
  void* address;
  uint64_t length;
  void* descriptor; /* the region's descriptor, as register_memory returned it */
  uint64_t owner;   /* the domain's owner() */
  uint8_t kind;     /* FABRIX_MEMORY_* */
  uint8_t reserved[3];
  int32_t device;
};

/* fabrix::remote_buffer: what a peer needs to target a region. */
struct fabrix_remote_buffer {
  uint16_t provider; /* the table's wire_id */
  uint16_t reserved0;
  uint32_t rights; /* FABRIX_ACCESS_* */
  uint8_t kind;
  uint8_t reserved1[3];
  int32_t device;
  uint64_t address;
  uint64_t length;
  uint64_t owner;
  uint64_t epoch;
  uint64_t seal;
  uint16_t key_size;
  uint8_t key[FABRIX_MAX_KEY_SIZE]; /* bytes past key_size are zero */
};

/* An entry of an endpoint's import table (fabrix::import_ref); generation 0
 * names nothing. */
struct fabrix_import_ref {
  uint32_t index;
  uint32_t generation;
};

/* fabrix::remote_slice (see the header comment). */
struct fabrix_remote_slice {
  const struct fabrix_remote_buffer* buffer; /* NULL: the imported key below */
  uint64_t offset;
  uint64_t length;
  struct fabrix_import_ref key_ref;
  uint64_t key_address;
  uint64_t key_length;
  uint32_t key_rights;
  uint16_t key_provider;
  uint8_t key_kind;
  uint8_t reserved;
  int32_t key_device;
  uint32_t reserved2;
};

/* fabrix::operation. `locals` points at `local_count` slices (at least 1 for
 * every opcode but flush; a flush may carry one empty slice), valid during
 * the post call only. */
struct fabrix_operation {
  uint8_t code;    /* FABRIX_OP_* */
  uint8_t options; /* FABRIX_OPTION_* bits */
  uint8_t flags;   /* fabrix's internal routing bits: give back unchanged in the completion */
  uint8_t reserved;
  uint32_t imm;
  uint64_t token;
  uint64_t operand; /* fetch_add: addend; compare_swap: value to swap in */
  uint64_t compare; /* compare_swap: expected value */
  const struct fabrix_local_slice* locals;
  uint64_t local_count;
  struct fabrix_remote_slice remote;
};

/* fabrix::completion */
struct fabrix_completion {
  uint64_t token;
  uint64_t bytes;
  uint8_t status; /* FABRIX_STATUS_* */
  uint8_t op;     /* FABRIX_OP_* */
  uint8_t flags;
  uint8_t reserved;
  uint32_t imm;
  int32_t native_code;
  uint32_t peer;
};

/* fabrix::capabilities (booleans are 0 or 1). */
struct fabrix_capabilities {
  uint8_t rma;
  uint8_t write_with_imm;
  uint8_t atomics;
  uint8_t send_recv;
  uint8_t gpu; /* FABRIX_GPU_* */
  uint8_t needs_target_progress;
  uint8_t reserved[2];
  uint32_t max_sge;
};

/* fabrix::domain_options. The strings are never NULL (empty: the provider's
 * default) and valid during open_domain only. */
struct fabrix_domain_options {
  const char* provider;
  const char* transport;
  const char* device;
  uint64_t max_outstanding;
  uint64_t max_posted_recvs;
  uint8_t wakeup;
  uint8_t reserved[7];
};

struct fabrix_provider_table {
  uint32_t size;        /* sizeof the table as the plugin knows it (covers every field it has) */
  uint32_t abi_version; /* 1..FABRIX_PROVIDER_ABI_VERSION */
  const char* name;     /* must equal <name> of the file libfabrix-<name>.so */
  const char* version;  /* the plugin's own version, for logs; may be "" */
  int32_t priority;     /* fabrix::open("auto") tries higher first */
  uint16_t wire_id;     /* the provider number its remote_buffers carry: fabrix_provider_id_of(name) */
  uint16_t reserved;

  /* ---- version 1 ---- */

  /* Opens a domain; *out on success. */
  int32_t (*open_domain)(const struct fabrix_domain_options* options, fabrix_plugin_domain** out,
                         struct fabrix_error* error);
  /* Closes a domain whose endpoints and regions are all closed. */
  void (*close_domain)(fabrix_plugin_domain* domain);
  /* One line about the domain (provider, transport, device), written as
   * snprintf does: at most `capacity` bytes with the NUL; returns the
   * length of the whole line (without the NUL). */
  size_t (*describe)(const fabrix_plugin_domain* domain, char* buffer, size_t capacity);
  void (*capabilities)(const fabrix_plugin_domain* domain, struct fabrix_capabilities* out);
  /* The domain's address blob for a peer's connect. *size: in, the capacity
   * of `buffer` (may be 0 with buffer NULL); out, the blob's length. Writes
   * the blob only when it fits, else returns FABRIX_STATUS_TRUNCATED (error
   * filled) and the caller asks again with a larger buffer. */
  int32_t (*address)(const fabrix_plugin_domain* domain, void* buffer, size_t* size, struct fabrix_error* error);
  /* Registers [address, address+length) of memory kind/device with `rights`
   * (FABRIX_ACCESS_* bits). On success: *out, the region's remote buffer in
   * *remote and its descriptor (what local slices carry) in *descriptor. */
  int32_t (*register_memory)(fabrix_plugin_domain* domain, void* address, size_t length, uint8_t kind, int32_t device,
                             uint32_t rights, fabrix_plugin_region** out, struct fabrix_remote_buffer* remote,
                             void** descriptor, struct fabrix_error* error);
  void (*deregister_memory)(fabrix_plugin_region* region);
  /* An endpoint to the peer whose address blob is peer[0..peer_size);
   * completions arriving on it carry peer_id. */
  int32_t (*connect)(fabrix_plugin_domain* domain, const void* peer, size_t peer_size, uint32_t peer_id,
                     fabrix_plugin_endpoint** out, struct fabrix_error* error);
  /* Closes an endpoint; operations posted on it still complete (with an
   * error where they cannot finish) through the domain's poll. */
  void (*disconnect)(fabrix_plugin_endpoint* endpoint);
  /* Posts ops[0..count) in order; *posted: how many went out. On
   * FABRIX_STATUS_AGAIN or an error, ops[*posted] is the one refused. */
  int32_t (*post)(fabrix_plugin_endpoint* endpoint, const struct fabrix_operation* ops, size_t count, size_t* posted);
  /* Drives progress; fills up to `capacity` completions, returns how many. */
  size_t (*poll)(fabrix_plugin_domain* domain, struct fabrix_completion* out, size_t capacity);
  /* Blocks until a completion may be ready (OK) or timeout_ms passes
   * (TIMED_OUT); 0 <= timeout_ms <= INT32_MAX. */
  int32_t (*wait)(fabrix_plugin_domain* domain, int64_t timeout_ms);
  /* The id the domain's regions carry (remote_buffer.owner); never 0. */
  uint64_t (*owner)(const fabrix_plugin_domain* domain);
  /* Unsignaled operations of the endpoint finished so far. */
  uint64_t (*finished)(const fabrix_plugin_endpoint* endpoint);
  /* fabrix's queue_pair::import: checks `remote` once, keeps its key. */
  int32_t (*import_key)(fabrix_plugin_endpoint* endpoint, const struct fabrix_remote_buffer* remote,
                        struct fabrix_import_ref* out, struct fabrix_error* error);
  /* OK, or FABRIX_STATUS_INVALID_ARGUMENT when `ref` names no live entry. */
  int32_t (*release_key)(fabrix_plugin_endpoint* endpoint, uint32_t index, uint32_t generation);
  /* The queue pair's default options (FABRIX_OPTION_UNSIGNALED/DELIVERED). */
  void (*set_default_options)(fabrix_plugin_endpoint* endpoint, uint8_t options);

  /* ---- version 2 ---- */

  /* `length` bytes of host memory allocated and registered by the provider,
   * freed by deregister_memory. NULL: the provider does not allocate. */
  int32_t (*allocate_memory)(fabrix_plugin_domain* domain, size_t length, uint32_t rights, fabrix_plugin_region** out,
                             struct fabrix_remote_buffer* remote, void** descriptor, struct fabrix_error* error);
  /* Refuses host memory the provider knows is not host memory (see
   * fabrix::checks_host_memory). NULL: every range is fine. */
  int32_t (*check_host_memory)(fabrix_plugin_domain* domain, const void* address, size_t length,
                               struct fabrix_error* error);
};

/* The size of a version-1 table: everything before allocate_memory. */
#define FABRIX_PROVIDER_TABLE_V1_SIZE offsetof(struct fabrix_provider_table, allocate_memory)
/* The size of a version-2 table. */
#define FABRIX_PROVIDER_TABLE_V2_SIZE sizeof(struct fabrix_provider_table)

/* The number a provider's remote buffers carry, and its table's wire_id:
 * fabrix::provider_id_of(name) (capabilities.hpp). The built-in names have
 * 1 to 4; any other name is 256 + (64-bit FNV-1a of its bytes) % 65280, so
 * every process computes the same number without asking anybody. The loader
 * refuses a table whose wire_id is not this, or whose number another
 * provider name already holds in the process. */
static inline uint16_t fabrix_provider_id_of(const char* name) {
  static const char* const builtin[] = {"ucx", "verbs", "ofi", "cuda_ipc"};
  uint64_t h = 0xcbf29ce484222325ull;
  const char* c;
  unsigned i;
  if (name == NULL || name[0] == '\0') return 0;
  for (i = 0; i < 4; ++i) {
    const char* a = builtin[i];
    const char* b = name;
    while (*a != '\0' && *a == *b) {
      ++a;
      ++b;
    }
    if (*a == '\0' && *b == '\0') return (uint16_t)(i + 1);
  }
  for (c = name; *c != '\0'; ++c) {
    h ^= (uint8_t)*c;
    h *= 0x100000001b3ull;
  }
  return (uint16_t)(256 + h % 65280);
}

typedef const struct fabrix_provider_table* (*fabrix_provider_entry_fn)(uint32_t host_abi_version);

/* Every plugin defines it (plugin_export.hpp's FABRIX_EXPORT_PROVIDER does). */
const struct fabrix_provider_table* fabrix_provider_entry(uint32_t host_abi_version);

#ifdef __cplusplus
}
#endif

#endif /* FABRIX_PROVIDER_ABI_H */
