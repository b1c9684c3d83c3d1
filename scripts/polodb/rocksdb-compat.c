/*
 * rocksdb-compat.c: the five RocksDB C-API functions PoloDB 5.3 calls that Debian's librocksdb (7.8) lacks.
 *
 * scripts/services builds PoloDB (the MongoDB-wire server the tests use) against Debian's librocksdb-dev instead of
 * compiling RocksDB's ~300 C++ files from source, which took ~25 minutes on 2 cores. PoloDB calls
 * rocksdb_wait_for_compact (added in RocksDB 8.x) only when it closes the database, right before it syncs the WAL
 * (rocksdb_transactiondb_flush_wal with sync=1) and closes: waiting for background compaction there is an
 * optimisation of the next open, not a durability step, so a call that returns at once keeps every write.
 * Only the signatures PoloDB uses are provided; nothing here touches RocksDB itself.
 */
#include <stdlib.h>

typedef struct rocksdb_wait_for_compact_options_t {
  unsigned char flush;
} rocksdb_wait_for_compact_options_t;

rocksdb_wait_for_compact_options_t *rocksdb_wait_for_compact_options_create(void) {
  return calloc(1, sizeof(rocksdb_wait_for_compact_options_t));
}

void rocksdb_wait_for_compact_options_destroy(rocksdb_wait_for_compact_options_t *opt) { free(opt); }

void rocksdb_wait_for_compact_options_set_flush(rocksdb_wait_for_compact_options_t *opt, unsigned char v) {
  if (opt) opt->flush = v;
}

unsigned char rocksdb_wait_for_compact_options_get_flush(rocksdb_wait_for_compact_options_t *opt) {
  return opt ? opt->flush : 0;
}

void rocksdb_wait_for_compact(void *db, rocksdb_wait_for_compact_options_t *options, char **errptr) {
  (void)db;
  (void)options;
  (void)errptr;
}
