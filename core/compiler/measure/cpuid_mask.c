/* A process that sees no AVX-512: the CPUID instruction, made to fault, answered with the
 * AVX-512 feature bits cleared (see cpuid_mask.py).
 *
 * Preloaded (LD_PRELOAD) into a process, its constructor asks Linux to make CPUID fault in this
 * thread and every thread it creates (arch_prctl ARCH_SET_CPUID 0, which needs CPUID faulting:
 * Intel CPUs since Ivy Bridge, and KVM guests, where KVM emulates it on AMD hosts too; rr's users
 * report bare-metal Zen 4 Ryzens without it). Each
 * CPUID then raises SIGSEGV; the handler turns faulting off for its own thread, runs the real
 * instruction, turns it on again, clears the AVX-512 bits of leaf 7, writes the four registers
 * and steps over the instruction. Libraries that pick their kernels from CPUID when they load
 * (onnxruntime's MLAS, OpenBLAS, numpy) then pick the AVX2 ones on an AVX-512 host.
 *
 * What it does not change: XGETBV (XCR0 still enables the AVX-512 register state; MLAS and the
 * others test the CPUID bit as well), /proc/cpuinfo, and code compiled for AVX-512 ahead of
 * time. A SIGSEGV that is not a CPUID goes to the handler the process installed (sigaction and
 * signal are wrapped here: a SIGSEGV handler installed later, such as TVM's backtrace printer or
 * Python's faulthandler, is kept as the one to pass other faults to, and the mask's stays in
 * place), or ends the process as it would have.
 */
#define _GNU_SOURCE
#include <asm/prctl.h>
#include <cpuid.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

/* leaf 7 subleaf 0 */
#define EBX_AVX512 ((1u << 16) | (1u << 17) | (1u << 21) | (1u << 26) | (1u << 27) | (1u << 28) | (1u << 30) | (1u << 31))
#define ECX_AVX512 ((1u << 1) | (1u << 6) | (1u << 11) | (1u << 12) | (1u << 14))
#define EDX_AVX512 ((1u << 2) | (1u << 3) | (1u << 8) | (1u << 23))
/* leaf 7 subleaf 1: AVX512_BF16 */
#define EAX1_AVX512 (1u << 5)

static struct sigaction previous;  /* the process's own SIGSEGV action: where other faults go */
static volatile int active;  /* 1 once faulting is on and the handler installed */
static volatile unsigned long answered;  /* CPUIDs the handler answered */

static long set_cpuid(int enabled) { return syscall(SYS_arch_prctl, ARCH_SET_CPUID, enabled); }

typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);

static int real_sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
    static sigaction_fn real;
    if (!real)
        real = (sigaction_fn)dlsym(RTLD_NEXT, "sigaction");
    return real(sig, act, old);
}

/* While the mask is active, SIGSEGV actions are recorded, not installed. */
int sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
    if (sig != SIGSEGV || !active)
        return real_sigaction(sig, act, old);
    struct sigaction was = previous;
    if (act)
        previous = *act;
    if (old)
        *old = was;
    return 0;
}

sighandler_t signal(int sig, sighandler_t handler) {
    struct sigaction act, old;
    memset(&act, 0, sizeof act);
    act.sa_handler = handler;
    act.sa_flags = SA_RESTART;
    sigemptyset(&act.sa_mask);
    if (sigaction(sig, &act, &old) != 0)
        return SIG_ERR;
    return (old.sa_flags & SA_SIGINFO) ? (sighandler_t)old.sa_sigaction : old.sa_handler;
}

static void on_segv(int sig, siginfo_t *info, void *context) {
    ucontext_t *uc = (ucontext_t *)context;
    greg_t *r = uc->uc_mcontext.gregs;
    const unsigned char *ip = (const unsigned char *)r[REG_RIP];
    if (info->si_code == SI_KERNEL && ip[0] == 0x0f && ip[1] == 0xa2) {
        unsigned leaf = (unsigned)r[REG_RAX], sub = (unsigned)r[REG_RCX];
        unsigned a, b, c, d;
        set_cpuid(1);
        __cpuid_count(leaf, sub, a, b, c, d);
        set_cpuid(0);
        if (leaf == 7 && sub == 0) {
            b &= ~EBX_AVX512;
            c &= ~ECX_AVX512;
            d &= ~EDX_AVX512;
        } else if (leaf == 7 && sub == 1) {
            a &= ~EAX1_AVX512;
        }
        r[REG_RAX] = a;  /* CPUID zero-extends into the 64-bit registers */
        r[REG_RBX] = b;
        r[REG_RCX] = c;
        r[REG_RDX] = d;
        r[REG_RIP] += 2;
        __atomic_add_fetch(&answered, 1, __ATOMIC_RELAXED);
        return;
    }
    /* not a CPUID: the process's own handler, or the default action when the fault comes again */
    struct sigaction own = previous;
    if (own.sa_flags & SA_SIGINFO) {
        if (own.sa_sigaction) {
            own.sa_sigaction(sig, info, context);
            return;
        }
    } else if (own.sa_handler != SIG_DFL && own.sa_handler != SIG_IGN) {
        own.sa_handler(sig);
        return;
    }
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    real_sigaction(SIGSEGV, &dfl, NULL);
}

__attribute__((constructor)) static void mlcwb_cpuid_mask_start(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    if (real_sigaction(SIGSEGV, &sa, &previous) != 0)
        return;
    if (set_cpuid(0) != 0) {
        real_sigaction(SIGSEGV, &previous, NULL);  /* no CPUID faulting here: nothing is masked */
        return;
    }
    active = 1;
}

/* 1 when CPUID faults and is answered here. */
int mlcwb_cpuid_mask_active(void) { return active; }

/* CPUIDs answered so far. */
unsigned long mlcwb_cpuid_mask_answered(void) { return answered; }

/* The calling thread's view of leaf 7's EBX, through the instruction itself (bit 16: AVX512F). */
unsigned mlcwb_cpuid_leaf7_ebx(void) {
    unsigned a, b, c, d;
    __cpuid_count(7, 0, a, b, c, d);
    return b;
}
