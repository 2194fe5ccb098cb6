/* The VM layer's error domain and its one formatting helper (vm-error.h). */
#include "vm-error.h"

GQuark sbx_vm_error_quark(void)
{
    return g_quark_from_static_string("sbx-vm-error-quark");
}

gboolean sbx_vm_fail(GError **error, SbxVmError code, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    g_autofree char *msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    g_set_error_literal(error, SBX_VM_ERROR, code, msg);
    return FALSE;
}
