/*
 * Error domains of the tools module.
 */
#include "tools-error.h"

/* clang-format off */
G_DEFINE_QUARK(sbx-catalog-error-quark, sbx_catalog_error)
G_DEFINE_QUARK(sbx-tool-error-quark, sbx_tool_error)
/* clang-format on */
