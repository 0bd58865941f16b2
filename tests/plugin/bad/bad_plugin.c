/* Plugins the loader must refuse (test_loader.cpp), in C99: each build picks
 * one defect with -DBAD_<kind>. The functions are stubs that are never
 * called: every one of these tables is refused before a domain is opened.
 *   BAD_NO_ENTRY      exports its entry under another name
 *   BAD_SMALL         size smaller than a version-1 table
 *   BAD_ABI_ZERO      abi_version 0
 *   BAD_ABI_FUTURE    abi_version FABRIX_PROVIDER_ABI_VERSION + 1
 *   BAD_NAME          names provider "other" from libfabrix-misnamed.so
 *   BAD_NULL_FN       a version-1 function (post) is NULL
 *   BAD_REFUSES       the entry returns NULL (cannot serve this host)
 *   BAD_WIRE_ID       a wire_id that is not fabrix_provider_id_of(its name)
 * (libfabrix-fake_clash_2904.so is well formed: its name's number is that of
 * fake_clash_1549, which the test registers first.)
 */
#include <fabrix/provider_abi.h>

#include <stddef.h>
#include <stdint.h>

#ifndef BAD_NAME_STRING
#define BAD_NAME_STRING "bad"
#endif

static int32_t stub_open_domain(const struct fabrix_domain_options* o, fabrix_plugin_domain** out,
                                struct fabrix_error* e) {
  static const char message[] = "stub plugin: no domain here";
  size_t i;
  (void)o;
  (void)out;
  e->status = FABRIX_STATUS_UNSUPPORTED;
  e->native_code = 42;
  for (i = 0; i < sizeof(message); ++i) e->message[i] = message[i];
  return FABRIX_STATUS_UNSUPPORTED;
}
static void stub_close_domain(fabrix_plugin_domain* d) { (void)d; }
static size_t stub_describe(const fabrix_plugin_domain* d, char* b, size_t c) {
  (void)d;
  if (c > 0) b[0] = '\0';
  return 0;
}
static void stub_capabilities(const fabrix_plugin_domain* d, struct fabrix_capabilities* c) {
  (void)d;
  (void)c;
}
static int32_t stub_address(const fabrix_plugin_domain* d, void* b, size_t* s, struct fabrix_error* e) {
  (void)d;
  (void)b;
  (void)s;
  (void)e;
  return FABRIX_STATUS_UNSUPPORTED;
}
static int32_t stub_register_memory(fabrix_plugin_domain* d, void* a, size_t l, uint8_t k, int32_t dev, uint32_t r,
                                    fabrix_plugin_region** out, struct fabrix_remote_buffer* rb, void** desc,
                                    struct fabrix_error* e) {
  (void)d, (void)a, (void)l, (void)k, (void)dev, (void)r, (void)out, (void)rb, (void)desc, (void)e;
  return FABRIX_STATUS_UNSUPPORTED;
}
static void stub_deregister_memory(fabrix_plugin_region* r) { (void)r; }
static int32_t stub_connect(fabrix_plugin_domain* d, const void* p, size_t n, uint32_t id, fabrix_plugin_endpoint** out,
                            struct fabrix_error* e) {
  (void)d, (void)p, (void)n, (void)id, (void)out, (void)e;
  return FABRIX_STATUS_UNSUPPORTED;
}
static void stub_disconnect(fabrix_plugin_endpoint* e) { (void)e; }
static int32_t stub_post(fabrix_plugin_endpoint* e, const struct fabrix_operation* ops, size_t n, size_t* posted) {
  (void)e, (void)ops, (void)n;
  *posted = 0;
  return FABRIX_STATUS_UNSUPPORTED;
}
static size_t stub_poll(fabrix_plugin_domain* d, struct fabrix_completion* out, size_t n) {
  (void)d, (void)out, (void)n;
  return 0;
}
static int32_t stub_wait(fabrix_plugin_domain* d, int64_t ms) {
  (void)d, (void)ms;
  return FABRIX_STATUS_TIMED_OUT;
}
static uint64_t stub_owner(const fabrix_plugin_domain* d) {
  (void)d;
  return 1;
}
static uint64_t stub_finished(const fabrix_plugin_endpoint* e) {
  (void)e;
  return 0;
}
static int32_t stub_import_key(fabrix_plugin_endpoint* e, const struct fabrix_remote_buffer* rb,
                               struct fabrix_import_ref* out, struct fabrix_error* err) {
  (void)e, (void)rb, (void)out, (void)err;
  return FABRIX_STATUS_UNSUPPORTED;
}
static int32_t stub_release_key(fabrix_plugin_endpoint* e, uint32_t i, uint32_t g) {
  (void)e, (void)i, (void)g;
  return FABRIX_STATUS_INVALID_ARGUMENT;
}
static void stub_set_default_options(fabrix_plugin_endpoint* e, uint8_t o) { (void)e, (void)o; }

#ifdef BAD_NO_ENTRY
#define ENTRY fabrix_provider_entry_v0
const struct fabrix_provider_table* ENTRY(uint32_t host);
#else
#define ENTRY fabrix_provider_entry
#endif

static struct fabrix_provider_table table;

__attribute__((visibility("default"))) const struct fabrix_provider_table* ENTRY(uint32_t host) {
  (void)host;
  table.size = (uint32_t)FABRIX_PROVIDER_TABLE_V1_SIZE;
  table.abi_version = 1;
  table.name = BAD_NAME_STRING;
  table.wire_id = fabrix_provider_id_of(BAD_NAME_STRING);
  table.version = "test";
  table.open_domain = stub_open_domain;
  table.close_domain = stub_close_domain;
  table.describe = stub_describe;
  table.capabilities = stub_capabilities;
  table.address = stub_address;
  table.register_memory = stub_register_memory;
  table.deregister_memory = stub_deregister_memory;
  table.connect = stub_connect;
  table.disconnect = stub_disconnect;
  table.post = stub_post;
  table.poll = stub_poll;
  table.wait = stub_wait;
  table.owner = stub_owner;
  table.finished = stub_finished;
  table.import_key = stub_import_key;
  table.release_key = stub_release_key;
  table.set_default_options = stub_set_default_options;
#ifdef BAD_SMALL
  table.size = (uint32_t)offsetof(struct fabrix_provider_table, set_default_options);
#endif
#ifdef BAD_ABI_ZERO
  table.abi_version = 0;
#endif
#ifdef BAD_ABI_FUTURE
  table.abi_version = FABRIX_PROVIDER_ABI_VERSION + 1;
#endif
#ifdef BAD_NULL_FN
  table.post = NULL;
#endif
#ifdef BAD_WIRE_ID
  table.wire_id = 7;
#endif
#ifdef BAD_REFUSES
  return NULL;
#else
  return &table;
#endif
}
