/* The controller's queue keys, "kind:ns/name". */
#include <string.h>

#include "controller.h"
#include "tap.h"

int main(void)
{
    char buf[64];

    ok(sbx_queue_key(buf, sizeof(buf), "claim", "ns", "c") && !strcmp(buf, "claim:ns/c"),
       "queue key");
    ok(sbx_queue_key(buf, sizeof(buf), "node", NULL, "n") && !strcmp(buf, "node:/n"),
       "a cluster-scoped object's key");
    ok(!sbx_queue_key(buf, 8, "claim", "ns", "c"), "queue key too long");
    return done_testing();
}
