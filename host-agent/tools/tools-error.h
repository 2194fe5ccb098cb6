/*
 * Error domains of the tools module.
 */
#pragma once

#include <glib.h>

#include "protocol/message.h"

/* Loading and validating a catalog (including names that cannot be made identifiers). */
#define SBX_CATALOG_ERROR (sbx_catalog_error_quark())
GQuark sbx_catalog_error_quark(void);

typedef enum {
    SBX_CATALOG_ERROR_IO,      /* the file cannot be read, or is too large */
    SBX_CATALOG_ERROR_INVALID, /* syntax or a field breaks a rule; the message names it */
} SbxCatalogErrorCode;

/*
 * A failed tool call, as the guest will see it. The error code is an SbxErrorCode from
 * protocol/message.h (SBX_ERR_TOOL, SBX_ERR_VALIDATION, ...), so it crosses to the guest as is.
 * Cancellation by the host is reported as G_IO_ERROR_CANCELLED instead.
 */
#define SBX_TOOL_ERROR (sbx_tool_error_quark())
GQuark sbx_tool_error_quark(void);
