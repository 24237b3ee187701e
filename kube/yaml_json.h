/* YAML documents to jansson values, for kubeconfig files (YAML or JSON). */
#pragma once

#include <jansson.h>
#include <stddef.h>

#include "error.h"

/* Parses the first document of buf. Mappings become objects (keys as strings), sequences
 * arrays, and scalars strings, except plain true/false/null and plain integers. Aliases are
 * refused; nesting is bounded. Returns 0 and a new reference in *ret, or -EINVAL. */
int sbx_yaml_to_json(const char *buf, size_t len, json_t **ret, struct sbx_error *err);
