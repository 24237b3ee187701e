/* A static no-op program for the Execute benchmark: no libc, no dynamic loader, no startup code.
 * Its whole life is execve + exit_group(0), so spawning it measures the daemon's spawn path and
 * the kernel's exec, and nothing of ld.so or libc initialisation (which /bin/true pays).
 * Built by run.sh: gcc -O2 -static -nostdlib -nostartfiles -fno-stack-protector -o noop noop.c
 * (x86_64 and aarch64). */
void _start(void) __attribute__((noreturn, used));

void _start(void)
{
#if defined(__x86_64__)
    __asm__ volatile("mov $231, %eax\n\t" /* SYS_exit_group */
                     "xor %edi, %edi\n\t"
                     "syscall");
#elif defined(__aarch64__)
    __asm__ volatile("mov x8, #94\n\t" /* SYS_exit_group */
                     "mov x0, #0\n\t"
                     "svc #0");
#else
#error "noop.c: add exit_group for this architecture"
#endif
    for (;;)
        ;
}
