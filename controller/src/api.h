/* The agent-sandbox API as the controller speaks it: the groups and versions of the resources
 * it serves, and the labels it reads and puts on what it makes. */
#pragma once

#define SBX_GROUP           "agents.x-k8s.io"
#define SBX_API_VERSION     "agents.x-k8s.io/v1beta1"
#define SBX_EXT_GROUP       "extensions.agents.x-k8s.io"
#define SBX_EXT_API_VERSION "extensions.agents.x-k8s.io/v1beta1"
#define SBX_LABEL_HASH      "agents.x-k8s.io/sandbox-name-hash"
#define SBX_LABEL_POOL      "agents.x-k8s.io/warm-pool-sandbox"
#define SBX_LABEL_CLAIM     "agents.x-k8s.io/claim-uid"
#define SBX_LABEL_TEMPLATE  "agents.x-k8s.io/sandbox-template-ref-hash"
#define SBX_LABEL_BLUEPRINT "agents.x-k8s.io/sandbox-template-hash"
#define SBX_LABEL_MANAGED   "app.kubernetes.io/managed-by"
#define SBX_MANAGER         "sandboxd-controller"
