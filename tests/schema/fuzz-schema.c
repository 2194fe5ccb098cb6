/*
 * Fuzz target: the JSON Schema validator on hostile schemas and hostile instances. The input is
 * "<schema>\n\n<instance>" (no separator: the whole input is the instance of a fixed schema
 * that exercises every keyword). Compiling must fail cleanly or succeed; validating must answer
 * (valid, invalid, or too complex) within its limits; nothing may crash or leak.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "schema.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A schema using every supported keyword, for inputs that carry only an instance. */
static const char fixed_schema[] =
    "{\"$defs\":{\"n\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":9,\"multipleOf\":3}},"
    "\"type\":\"object\",\"required\":[\"q\"],\"additionalProperties\":{\"type\":\"string\","
    "\"maxLength\":4},\"properties\":{\"q\":{\"type\":\"string\",\"minLength\":1,"
    "\"pattern\":\"^[a-z]+$\"},\"n\":{\"$ref\":\"#/$defs/n\"},\"l\":{\"type\":\"array\","
    "\"items\":{\"anyOf\":[{\"const\":1},{\"enum\":[\"a\",null]}]},\"uniqueItems\":true,"
    "\"maxItems\":8},\"o\":{\"oneOf\":[{\"type\":\"null\"},{\"not\":{\"type\":\"number\"}}]},"
    "\"r\":{\"$ref\":\"#\"}},\"patternProperties\":{\"^x\":{\"allOf\":[true,{}]}}}";

static void validate(const SbxSchema *schema, const char *instance)
{
    GError *error = NULL;

    if (!sbx_schema_validate(schema, "input", instance, &error))
        g_clear_error(&error);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = g_strndup((const char *)data, size); /* stops at a NUL: fine, any prefix */
    char *split = strstr(text, "\n\n");
    GError *error = NULL;

    if (split != NULL) {
        *split = '\0';
        SbxSchema *schema = sbx_schema_compile(text, &error);
        if (schema != NULL)
            validate(schema, split + 2);
        g_clear_error(&error);
        sbx_schema_free(schema);
    } else {
        static SbxSchema *fixed;
        if (fixed == NULL)
            fixed = sbx_schema_compile(fixed_schema, NULL);
        if (fixed == NULL)
            abort(); /* the fixed schema is ours: it must compile */
        validate(fixed, text);
    }
    g_free(text);
    return 0;
}
