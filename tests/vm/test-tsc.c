/* The host TSC frequency: parsing the kernel's lines, the override, detection, measurement. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "tsc.h"
#include "vm-error.h"

static void test_parse_mhz(void **state)
{
    guint khz = 0;

    (void)state;
    assert_int_equal(sbx_tsc_parse_mhz("2599.998 MHz", &khz), 0);
    assert_int_equal(khz, 2599998);
    assert_int_equal(sbx_tsc_parse_mhz("2600", &khz), 0);
    assert_int_equal(khz, 2600000);
    assert_int_equal(sbx_tsc_parse_mhz("3000.5", &khz), 0);
    assert_int_equal(khz, 3000500);
    assert_int_equal(sbx_tsc_parse_mhz("2599.99876", &khz), 0); /* extra decimals dropped */
    assert_int_equal(khz, 2599998);
    khz = 7;
    assert_int_equal(sbx_tsc_parse_mhz("99.999", &khz), -EINVAL);    /* below 100 MHz */
    assert_int_equal(sbx_tsc_parse_mhz("10000.001", &khz), -EINVAL); /* above 10 GHz */
    assert_int_equal(sbx_tsc_parse_mhz("1234567", &khz), -EINVAL);
    assert_int_equal(sbx_tsc_parse_mhz("abc", &khz), -EINVAL);
    assert_int_equal(sbx_tsc_parse_mhz("", &khz), -EINVAL);
    assert_int_equal(khz, 7); /* untouched on failure */
}

static void test_from_log(void **state)
{
    static const char processor_only[] = "Linux version 6.1.0\n"
                                         "tsc: Detected 2599.998 MHz processor\n"
                                         "clocksource: tsc-early: mask: 0xffffffffffffffff\n";
    static const char all_three[] = "tsc: Detected 2400.000 MHz processor\n"
                                    "tsc: Detected 2399.876 MHz TSC\n"
                                    "tsc: Refined TSC clocksource calibration: 2399.912 MHz\n";
    static const char two_boots[] = /* kern.log style: the last boot wins */
        "tsc: Refined TSC clocksource calibration: 1999.000 MHz\n"
        "tsc: Refined TSC clocksource calibration: 2099.000 MHz\n";
    static const char junk[] = "tsc: Refined TSC clocksource calibration: fast\n"
                               "tsc: Detected lots of MHz TSC\n"
                               "tsc: Detected 12 MHz processor\n";
    guint khz = 0;

    (void)state;
    assert_int_equal(sbx_tsc_from_log(processor_only, &khz), 0);
    assert_int_equal(khz, 2599998);
    assert_int_equal(sbx_tsc_from_log(all_three, &khz), 0);
    assert_int_equal(khz, 2399912);
    assert_int_equal(sbx_tsc_from_log(two_boots, &khz), 0);
    assert_int_equal(khz, 2099000);
    assert_int_equal(sbx_tsc_from_log(junk, &khz), -ENOENT);
    assert_int_equal(sbx_tsc_from_log("", &khz), -ENOENT);
}

static void test_env_override(void **state)
{
    g_autoptr(GError) error = NULL;
    const char *source = NULL;
    guint khz = 0;

    (void)state;
    g_setenv("SANDBOX_TSC_KHZ", "1234567", TRUE);
    assert_true(sbx_tsc_host_khz(&khz, &source, &error));
    assert_int_equal(khz, 1234567);
    assert_string_equal(source, "SANDBOX_TSC_KHZ");
    g_setenv("SANDBOX_TSC_KHZ", "12", TRUE);
    assert_false(sbx_tsc_host_khz(&khz, &source, &error));
    assert_true(g_error_matches(error, SBX_VM_ERROR, SBX_VM_ERROR_CONFIG));
    assert_non_null(strstr(error->message, "SANDBOX_TSC_KHZ='12'"));
    g_unsetenv("SANDBOX_TSC_KHZ");
}

static void test_host_value(void **state)
{
    g_autoptr(GError) error = NULL;
    const char *source = NULL;
    guint khz = 0, again = 0, measured = 0;

    (void)state;
    g_unsetenv("SANDBOX_TSC_KHZ");
    if (!sbx_tsc_host_khz(&khz, &source, &error)) {
        print_message("no TSC frequency on this host: %s\n", error->message);
        skip();
    }
    print_message("host TSC: %u kHz (from %s)\n", khz, source);
    assert_in_range(khz, SBX_TSC_KHZ_MIN, SBX_TSC_KHZ_MAX);
    assert_true(sbx_tsc_host_khz(&again, NULL, &error)); /* cached: the same answer */
    assert_int_equal(again, khz);
    if (sbx_tsc_measure_khz(50, &measured) == 0) {
        print_message("measured: %u kHz\n", measured);
        /* The kernel's calibration and ours agree far better than 0.5%. */
        assert_in_range(measured, khz - khz / 200, khz + khz / 200);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_mhz),
        cmocka_unit_test(test_from_log),
        cmocka_unit_test(test_env_override),
        cmocka_unit_test(test_host_value),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
