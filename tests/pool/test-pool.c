/*
 * The warm pool's logic (host-agent/pool/pool.c) against a fake VM factory: the test decides
 * when each start succeeds or fails, which VMs are usable, which fail their health check, and
 * checks that every VM made is destroyed exactly once.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
#include <gio/gio.h>

#include "pool.h"

typedef struct {
    int id;
    gboolean started; /* reported ready */
    gboolean usable;
    gboolean healthy;
    gboolean destroyed;
} FakeVm;

typedef struct {
    GPtrArray *made; /* FakeVm*, every one ever made (freed at the end) */
    guint destroyed;
    SbxPool *pool;
} Fake;

static gpointer fake_start(SbxPool *pool, gpointer data)
{
    Fake *f = data;
    FakeVm *vm = g_new0(FakeVm, 1);
    (void)pool;

    vm->id = f->made->len;
    vm->usable = TRUE;
    vm->healthy = TRUE;
    g_ptr_array_add(f->made, vm);
    return vm;
}

static gboolean fake_usable(gpointer vm, gpointer data)
{
    (void)data;
    return ((FakeVm *)vm)->usable;
}

static gboolean fake_check(gpointer vm, gpointer data)
{
    (void)data;
    return ((FakeVm *)vm)->healthy;
}

static GPid fake_pid(gpointer vm, gpointer data)
{
    (void)data;
    return 1000 + ((FakeVm *)vm)->id;
}

static void fake_destroy(gpointer vm, gpointer data)
{
    Fake *f = data;
    FakeVm *v = vm;

    assert_false(v->destroyed); /* exactly once */
    v->destroyed = TRUE;
    f->destroyed++;
}

static const SbxPoolVmOps fake_ops = {
    .start = fake_start,
    .usable = fake_usable,
    .check = fake_check,
    .pid = fake_pid,
    .destroy = fake_destroy,
};

static Fake *fake_new_delayed(guint size, guint max_starting, guint check_ms, guint delay_ms)
{
    Fake *f = g_new0(Fake, 1);
    SbxPoolConfig cfg = {.size = size,
                         .max_starting = max_starting,
                         .check_interval_ms = check_ms,
                         .refill_delay_ms = delay_ms};

    f->made = g_ptr_array_new_with_free_func(g_free);
    f->pool = sbx_pool_new(&fake_ops, f, &cfg);
    return f;
}

static Fake *fake_new(guint size, guint max_starting, guint check_ms)
{
    return fake_new_delayed(size, max_starting, check_ms, 0);
}

/* Free the pool; every VM ever made must have been destroyed once (or claimed by the test). */
static void fake_free(Fake *f, guint claimed_alive)
{
    sbx_pool_free(f->pool);
    assert_int_equal(f->destroyed + claimed_alive, f->made->len);
    g_ptr_array_free(f->made, TRUE);
    g_free(f);
}

static FakeVm *vm_at(Fake *f, guint i)
{
    assert_true(i < f->made->len);
    return f->made->pdata[i];
}

static void report(Fake *f, guint i, gboolean ok)
{
    g_autoptr(GError) e = ok ? NULL : g_error_new_literal(G_IO_ERROR, G_IO_ERROR_FAILED, "boom");

    vm_at(f, i)->started = ok;
    sbx_pool_started(f->pool, vm_at(f, i), e);
}

static void spin(guint ms)
{
    gint64 end = g_get_monotonic_time() + ms * 1000ll;

    while (g_get_monotonic_time() < end) {
        g_main_context_iteration(NULL, FALSE);
        g_usleep(1000);
    }
}

typedef struct {
    int calls;
    FakeVm *vm;
    GError *error;
} Claim;

static void on_claim(gpointer vm, const GError *error, gpointer data)
{
    Claim *c = data;

    c->calls++;
    c->vm = vm;
    g_clear_error(&c->error);
    c->error = error != NULL ? g_error_copy(error) : NULL;
}

static void stats(Fake *f, SbxPoolStats *st)
{
    sbx_pool_stats(f->pool, st);
}

/* Fills to size with at most max_starting in flight; a claim gets a ready VM, never twice. */
static void test_fill_and_claim(void **state)
{
    Fake *f = fake_new(3, 2, 10000);
    SbxPoolStats st;
    Claim a = {0}, b = {0};
    (void)state;

    assert_int_equal(f->made->len, 2); /* bounded by max_starting */
    report(f, 0, TRUE);
    assert_int_equal(f->made->len, 3);
    report(f, 1, TRUE);
    report(f, 2, TRUE);
    stats(f, &st);
    assert_int_equal(st.ready, 3);
    assert_int_equal(st.starting, 0);

    sbx_pool_claim(f->pool, on_claim, &a);
    assert_int_equal(a.calls, 0); /* never from inside the call */
    sbx_pool_claim(f->pool, on_claim, &b);
    spin(5);
    assert_int_equal(a.calls, 1);
    assert_int_equal(b.calls, 1);
    assert_ptr_equal(a.vm, vm_at(f, 0)); /* oldest first */
    assert_ptr_equal(b.vm, vm_at(f, 1));
    stats(f, &st);
    assert_int_equal(st.ready, 1);
    assert_int_equal(st.starting, 2); /* refilling */
    assert_int_equal(st.claimed_total, 2);
    fake_free(f, 2);
}

/*
 * With a refill delay, the replacement of a claimed VM starts only after it; a claim that
 * waits meanwhile gets a start at once.
 */
static void test_refill_delay(void **state)
{
    Fake *f = fake_new_delayed(2, 2, 10000, 200);
    SbxPoolStats st;
    Claim a = {0}, b = {0}, c = {0};
    (void)state;

    report(f, 0, TRUE);
    report(f, 1, TRUE);
    sbx_pool_claim(f->pool, on_claim, &a);
    spin(20);
    assert_int_equal(a.calls, 1);
    stats(f, &st);
    assert_int_equal(st.starting, 0); /* held back */
    assert_int_equal(st.ready, 1);
    sbx_pool_claim(f->pool, on_claim, &b);
    sbx_pool_claim(f->pool, on_claim, &c);
    spin(20);
    assert_int_equal(b.calls, 1);
    assert_int_equal(c.calls, 0);
    stats(f, &st);
    assert_int_equal(st.starting, 1); /* for the waiting claim, at once */
    spin(300);
    stats(f, &st);
    assert_int_equal(st.starting, 2); /* and the pool's own after the delay */
    report(f, 2, TRUE);
    spin(20);
    assert_int_equal(c.calls, 1);
    fake_free(f, 3);
}

/* An empty pool (size 0) starts a VM on demand for a claim and hands it over when ready. */
static void test_on_demand(void **state)
{
    Fake *f = fake_new(0, 2, 10000);
    Claim a = {0};
    (void)state;

    assert_int_equal(f->made->len, 0);
    sbx_pool_claim(f->pool, on_claim, &a);
    assert_int_equal(f->made->len, 1);
    spin(5);
    assert_int_equal(a.calls, 0);
    report(f, 0, TRUE);
    spin(5);
    assert_int_equal(a.calls, 1);
    assert_ptr_equal(a.vm, vm_at(f, 0));
    assert_int_equal(f->made->len, 1); /* nothing more: size 0 */
    fake_free(f, 1);
}

/* A failed start fails the waiting claim; three in a row back off. */
static void test_failures(void **state)
{
    Fake *f = fake_new(0, 1, 10000);
    Claim a = {0}, b = {0}, c = {0};
    (void)state;

    sbx_pool_claim(f->pool, on_claim, &a);
    sbx_pool_claim(f->pool, on_claim, &b);
    sbx_pool_claim(f->pool, on_claim, &c);
    report(f, 0, FALSE);
    assert_int_equal(a.calls, 1);
    assert_null(a.vm);
    assert_non_null(a.error);
    report(f, 1, FALSE);
    report(f, 2, FALSE);
    assert_int_equal(c.calls, 1);
    assert_int_equal(f->made->len, 3);
    Claim d = {0};
    sbx_pool_claim(f->pool, on_claim, &d);
    spin(20);
    assert_int_equal(f->made->len, 3); /* backing off */
    spin(SBX_POOL_BACKOFF_MS + 100);
    assert_int_equal(f->made->len, 4); /* one more try after the back-off */
    report(f, 3, TRUE);
    spin(5);
    assert_ptr_equal(d.vm, vm_at(f, 3));
    g_clear_error(&a.error);
    g_clear_error(&b.error);
    g_clear_error(&c.error);
    fake_free(f, 1);
}

/* A pooled VM that dies or fails its check is destroyed and replaced. */
static void test_lost_and_check(void **state)
{
    Fake *f = fake_new(2, 2, 20);
    SbxPoolStats st;
    (void)state;

    report(f, 0, TRUE);
    report(f, 1, TRUE);
    sbx_pool_lost(f->pool, vm_at(f, 0));
    assert_true(vm_at(f, 0)->destroyed);
    assert_int_equal(f->made->len, 3); /* replaced */
    report(f, 2, TRUE);
    vm_at(f, 1)->healthy = FALSE;
    spin(60);
    assert_true(vm_at(f, 1)->destroyed);
    assert_int_equal(f->made->len, 4);
    stats(f, &st);
    assert_int_equal(st.dropped_total, 2);
    sbx_pool_lost(f->pool, vm_at(f, 3)); /* still starting: ignored, its start reports */
    assert_false(vm_at(f, 3)->destroyed);
    fake_free(f, 0);
}

/* Unusable VMs are skipped until the factory says they are usable again. */
static void test_unusable(void **state)
{
    Fake *f = fake_new(1, 1, 10000);
    Claim a = {0};
    (void)state;

    report(f, 0, TRUE);
    vm_at(f, 0)->usable = FALSE;
    sbx_pool_claim(f->pool, on_claim, &a);
    spin(5);
    /* The claim made the pool start another VM; it is not ready yet. */
    assert_int_equal(a.calls, 0);
    vm_at(f, 0)->usable = TRUE;
    sbx_pool_usable(f->pool, vm_at(f, 0));
    spin(5);
    assert_ptr_equal(a.vm, vm_at(f, 0));
    fake_free(f, 1);
}

/* A cancelled claim is never answered; freeing the pool fails claims still waiting. */
static void test_cancel_and_free(void **state)
{
    Fake *f = fake_new(0, 2, 10000);
    Claim a = {0}, b = {0};
    (void)state;

    guint64 id = sbx_pool_claim(f->pool, on_claim, &a);
    sbx_pool_claim(f->pool, on_claim, &b);
    sbx_pool_cancel_claim(f->pool, id);
    report(f, 0, TRUE);
    spin(5);
    assert_int_equal(a.calls, 0);
    assert_ptr_equal(b.vm, vm_at(f, 0));
    Claim c = {0};
    sbx_pool_claim(f->pool, on_claim, &c);
    sbx_pool_free(f->pool);
    f->pool = NULL;
    assert_int_equal(c.calls, 1);
    assert_true(g_error_matches(c.error, G_IO_ERROR, G_IO_ERROR_CANCELLED));
    g_clear_error(&c.error);
    /* Everything but the claimed VM was destroyed, including the one still starting. */
    assert_int_equal(f->destroyed + 1, f->made->len);
    g_ptr_array_free(f->made, TRUE);
    g_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fill_and_claim), cmocka_unit_test(test_on_demand),
        cmocka_unit_test(test_failures),       cmocka_unit_test(test_lost_and_check),
        cmocka_unit_test(test_unusable),       cmocka_unit_test(test_cancel_and_free),
        cmocka_unit_test(test_refill_delay),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
