/*
 * What the store's tests share: a temporary folder per test with a database path in a folder
 * that does not exist yet (the store makes it), removed whole at the end, and a record to fill.
 */
#pragma once

#include <glib.h>

#include "store/records.h"

typedef struct {
    char *dir;  /* the test's temporary folder */
    char *path; /* dir/state/sandbox.db */
} StoreFixture;

/** cmocka setup/teardown: *state is a StoreFixture. */
int store_fixture_setup(void **state);
int store_fixture_teardown(void **state);

/** A record ready for sbx_records_begin() (strings are literals: never freed). */
SbxRecord store_fixture_record(const char *id, const char *tenant_id, gint64 created_at_ms);

/** The one integer @sql answers, on @store's own connection (aborts if it does not). */
gint64 store_fixture_query_int(SbxStore *store, const char *sql);

/** All bytes of the files in @dir and its subfolders, concatenated. */
GByteArray *store_fixture_read_all(const char *dir);
