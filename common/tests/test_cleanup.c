/* The cleanup helpers of cleanup.h. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <unistd.h>

#include "cleanup.h"
#include "tap.h"

/* A closed fd's number is handed out again at once: closing it a second time (a release after a
 * failed setup) must not close the new owner's file. */
static void test_closep_twice(void)
{
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC), other, again;

    ok(fd >= 0, "opened /dev/null as fd %d", fd);
    again = fd;
    sbx_closep(&fd);
    ok(fd == -1, "sbx_closep leaves -1 behind");
    other = open("/dev/null", O_RDONLY | O_CLOEXEC);
    ok(other == again, "the number is reused (%d)", other);
    sbx_closep(&fd);
    ok(fcntl(other, F_GETFD) >= 0, "closing again leaves the new owner's fd open");
    sbx_closep(&other);
}

static void test_cleanup_attribute(void)
{
    int seen;

    {
        _cleanup_close_ int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        seen = fd;
        ok(fcntl(seen, F_GETFD) >= 0, "open inside the block");
    }
    ok(fcntl(seen, F_GETFD) < 0, "closed when the block ends");
}

int main(void)
{
    test_closep_twice();
    test_cleanup_attribute();
    return done_testing();
}
