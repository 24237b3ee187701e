#!/usr/bin/env bash
# Copies what the chart shares with the kustomize manifests from controller/config and
# router/config, their one source: the CRDs into sandboxd/crds/, and the controller's and the
# router's roles into sandboxd/files/rbac/,
# from which the chart's RBAC templates take their rules. Run it after changing either;
# test/controller/test_helm.py fails while the copies differ. (Copies, not symlinks: helm warns
# of every symlink it follows, on every command.)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
config="$here/../../controller/config"
chart="$here/sandboxd"
rm -f "$chart"/crds/*.yaml
cp "$config"/crd/*.yaml "$chart/crds/"
cp "$config/rbac/role.yaml" "$chart/files/rbac/role.yaml"
cp "$here/../../router/config/rbac/role.yaml" "$chart/files/rbac/router-role.yaml"
cp "$here/../../router/config/rbac/authz-sandbox-token.yaml" \
  "$chart/files/rbac/router-sandbox-token.yaml"
cp "$here/../../router/config/rbac/e2b.yaml" "$chart/files/rbac/router-e2b.yaml"
