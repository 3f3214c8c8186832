/* The workbench's parallel launch for TVM's CPU code: TVMBackendParallelLaunch with workers that
 * poll with the pause instruction and tasks that any thread may take.
 *
 * Why: TVM 0.27's pool (src/runtime/thread_pool.cc) costs ~2-3 us a parallel region on a 2-vCPU
 * KVM guest, because both sides poll with one sched_yield() system call per look; a region here
 * costs ~0.1 us of handshake. And TVM gives task i to thread i: when another process holds a
 * worker's core, every kernel waits for that worker. Here the calling thread runs task 0 and then
 * takes the tasks no worker has started, so a descheduled worker delays nothing it has not begun.
 *
 * How it is used: the library is loaded with RTLD_GLOBAL before libtvm_runtime.so (see
 * native_pool.py), so the dynamic linker resolves libtvm_runtime's own reference to
 * TVMBackendParallelLaunch (a GLOB_DAT relocation, read when a compiled module is loaded to fill
 * its __TVMBackendParallelLaunch pointer) to this definition. Nothing in TVM is patched.
 *
 * Semantics kept from TVM's launch (c_backend_api.h): num_task 0 means one task per thread;
 * the lambda's env carries num_task and a sync_handle laid out as TVM's (one int per task, 64
 * bytes apart), so TVM's TVMBackendParallelBarrier works when every task runs at once (it
 * cannot when a thread runs two tasks one after the other; the workbench's schedules emit no
 * barrier). A launch from inside a task, or while another thread's launch holds the pool, runs
 * its tasks on the calling thread. A failed task's error is reported by the launch (-1).
 *
 * The thread count is per calling thread (like TVM's thread-local pools): mlcwb_pool_set_threads.
 * mlcwb_pool_set_enabled(0) hands launches to TVM's own pool (libtvm_runtime's definition), for A/B
 * measurements in one process.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 256
#define SYNC_STRIDE 16 /* ints per task in sync_handle: TVM's kSyncStride */

typedef struct {
  void* sync_handle;
  int32_t num_task;
} TVMParallelGroupEnv;
typedef int (*FTVMParallelLambda)(int task_id, TVMParallelGroupEnv* penv, void* cdata);
typedef int (*LaunchFn)(FTVMParallelLambda, void*, int);

/* The job: written by the launching thread while it holds the pool, read by the workers. The
 * claim word packs generation (24 bits), task count (20) and next task (20): a worker takes a
 * task with one compare-and-swap on it, so a worker that slept through a job's end cannot take a
 * task of the next job with the previous job's function. */
static FTVMParallelLambda job_fn;
static void* job_cdata;
static TVMParallelGroupEnv job_env;
static int job_helpers;                 /* workers that may join this job */
static uint64_t claim;                  /* atomic */
static uint32_t generation;             /* atomic; the futex word workers sleep on */
static int32_t done;                    /* atomic: tasks finished */
static int32_t failed;                  /* atomic: tasks that returned nonzero */
static int32_t sleepers;                /* atomic: workers in futex_wait */
static int sync_ints[MAX_THREADS * SYNC_STRIDE] __attribute__((aligned(64)));

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static int workers;                     /* started; guarded by pool_lock */
static int default_threads;             /* threads for a calling thread that set none */
static int spin_us = 2000;              /* how long an idle worker polls before it sleeps */
/* For the first PAUSE_NS of it the worker polls with pause alone (the gap between a run's kernels is
 * a few us, between runs of a timing loop ~10-20 us); after that with a sched_yield between looks,
 * so the other threads of this process (a compile's build threads) and other processes get the core
 * as they would from TVM's pool, which yields from the first look. */
#define PAUSE_NS 100000ull
static int enabled = 1;
static uint64_t pooled_launches;        /* atomic: launches that used the workers */
static uint64_t launches;               /* atomic: every launch through this library */
static LaunchFn tvm_launch;             /* TVM's own, for enabled == 0 (find_tvm_runtime) */

static __thread int my_threads;         /* 0: default_threads */
static __thread int in_task;            /* a launch from inside a task runs serially */

static inline void cpu_relax(void) { __builtin_ia32_pause(); }

static inline uint64_t pack(uint32_t gen, uint32_t n, uint32_t next) {
  return ((uint64_t)(gen & 0xFFFFFF) << 40) | ((uint64_t)(n & 0xFFFFF) << 20) | (next & 0xFFFFF);
}
static inline uint32_t claim_gen(uint64_t c) { return (uint32_t)(c >> 40); }
static inline uint32_t claim_n(uint64_t c) { return (uint32_t)((c >> 20) & 0xFFFFF); }
static inline uint32_t claim_next(uint64_t c) { return (uint32_t)(c & 0xFFFFF); }

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Take and run tasks of generation `gen` until none is left; returns how many it ran. */
static int run_tasks(uint32_t gen) {
  int ran = 0;
  for (;;) {
    uint64_t c = __atomic_load_n(&claim, __ATOMIC_ACQUIRE);
    if (claim_gen(c) != (gen & 0xFFFFFF) || claim_next(c) >= claim_n(c)) return ran;
    FTVMParallelLambda fn = job_fn; /* read before the claim: valid if the claim succeeds */
    void* cdata = job_cdata;
    if (!__atomic_compare_exchange_n(&claim, &c, c + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) continue;
    int task = (int)claim_next(c);
    in_task = 1;
    int rc = fn(task, &job_env, cdata);
    in_task = 0;
    if (rc != 0) __atomic_fetch_add(&failed, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&done, 1, __ATOMIC_RELEASE);
    ran++;
  }
}

static void* worker_main(void* arg) {
  int index = (int)(intptr_t)arg;
  uint32_t seen = __atomic_load_n(&generation, __ATOMIC_ACQUIRE);
  for (;;) {
    uint64_t start = now_ns();
    uint64_t limit = (uint64_t)__atomic_load_n(&spin_us, __ATOMIC_RELAXED) * 1000ull;
    int spins = 0, yielding = 0;
    uint32_t g;
    while ((g = __atomic_load_n(&generation, __ATOMIC_ACQUIRE)) == seen) {
      if (yielding) {
        sched_yield(); /* past a run's kernel gaps: every look lets other threads have the core */
      } else {
        cpu_relax();
        if (++spins < 256) continue;
        spins = 0;
      }
      uint64_t idle = now_ns() - start;
      yielding = idle > PAUSE_NS;
      if (idle > limit) {
        __atomic_fetch_add(&sleepers, 1, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&generation, __ATOMIC_SEQ_CST) == seen)
          syscall(SYS_futex, &generation, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
        __atomic_fetch_sub(&sleepers, 1, __ATOMIC_SEQ_CST);
        start = now_ns();
        yielding = 0;
      }
    }
    seen = g;
    if (index < __atomic_load_n(&job_helpers, __ATOMIC_ACQUIRE)) run_tasks(g);
  }
  return NULL;
}

/* Start workers up to `count` (pool_lock held); returns how many run. */
static int start_workers(int count) {
  while (workers < count) {
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&t, &attr, worker_main, (void*)(intptr_t)workers);
    pthread_attr_destroy(&attr);
    if (rc != 0) break;
    workers++;
  }
  return workers;
}

static int run_serially(FTVMParallelLambda fn, void* cdata, int num_task) {
  TVMParallelGroupEnv env;
  int sync[SYNC_STRIDE * 2];
  memset(sync, 0, sizeof(sync));
  env.sync_handle = sync;
  env.num_task = num_task;
  int was = in_task;
  in_task = 1;
  int rc = 0;
  for (int i = 0; i < num_task && rc == 0; ++i) rc = fn(i, &env, cdata);
  in_task = was;
  return rc == 0 ? 0 : -1;
}

static void report_failure(int count) {
  typedef void (*SetRaised)(const char*, const char*);
  SetRaised set = (SetRaised)dlsym(RTLD_DEFAULT, "TVMFFIErrorSetRaisedFromCStr");
  if (set) {
    char msg[128];
    snprintf(msg, sizeof msg, "%d task(s) of a parallel loop failed", count);
    set("RuntimeError", msg);
  }
}

/* TVM's own launch: the definition in the loaded libtvm_runtime (dlsym on its handle finds the
 * library's own symbol, where the global lookup finds this file's). */
int TVMBackendParallelLaunch(FTVMParallelLambda flambda, void* cdata, int num_task);
static int find_tvm_runtime(struct dl_phdr_info* info, size_t size, void* data) {
  (void)size;
  if (info->dlpi_name && strstr(info->dlpi_name, "libtvm_runtime.so")) {
    void* handle = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
    if (handle) {
      void* fn = dlsym(handle, "TVMBackendParallelLaunch");
      dlclose(handle);
      if (fn && fn != (void*)&TVMBackendParallelLaunch) {
        *(void**)data = fn;
        return 1;
      }
    }
  }
  return 0;
}

int TVMBackendParallelLaunch(FTVMParallelLambda flambda, void* cdata, int num_task) {
  __atomic_fetch_add(&launches, 1, __ATOMIC_RELAXED);
  if (!__atomic_load_n(&enabled, __ATOMIC_RELAXED)) {
    if (!tvm_launch) {
      void* fn = NULL;
      dl_iterate_phdr(find_tvm_runtime, &fn);
      tvm_launch = (LaunchFn)fn;
    }
    if (tvm_launch) return tvm_launch(flambda, cdata, num_task);
  }
  int threads = my_threads > 0 ? my_threads : default_threads;
  if (threads > MAX_THREADS) threads = MAX_THREADS;
  if (num_task <= 0) num_task = threads;
  if (threads <= 1) return run_serially(flambda, cdata, 1); /* as TVM: one task when one thread */
  if (num_task > MAX_THREADS) num_task = MAX_THREADS; /* the lambda splits by env.num_task */
  if (num_task == 1 || in_task || pthread_mutex_trylock(&pool_lock) != 0)
    return run_serially(flambda, cdata, num_task);

  int helpers = threads - 1 < num_task - 1 ? threads - 1 : num_task - 1;
  helpers = start_workers(helpers) < helpers ? workers : helpers;
  memset(sync_ints, 0, sizeof(int) * SYNC_STRIDE * (size_t)num_task);
  job_fn = flambda;
  job_cdata = cdata;
  job_env.sync_handle = sync_ints;
  job_env.num_task = num_task;
  __atomic_store_n(&done, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&failed, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&job_helpers, helpers, __ATOMIC_RELEASE);
  uint32_t gen = (__atomic_load_n(&generation, __ATOMIC_RELAXED) + 1) & 0xFFFFFF;
  /* Task 0 is the caller's own: the workers take from task 1 on. So each core gets the same share
   * of every kernel (the caller the first rows, a worker the next), and a kernel reads in its
   * cache what the same core wrote in the last one. Claimed first come, the shares swapped from
   * kernel to kernel whenever a worker saw the launch before the caller claimed: resnet50 and
   * inception_v1 ran 4-6% slower at 2 threads than with TVM's pool (parallel_split tvm-pool). */
  __atomic_store_n(&claim, pack(gen, (uint32_t)num_task, 1), __ATOMIC_RELEASE);
  __atomic_store_n(&generation, gen, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&sleepers, __ATOMIC_SEQ_CST) > 0)
    syscall(SYS_futex, &generation, FUTEX_WAKE_PRIVATE, helpers, NULL, NULL, 0);
  __atomic_fetch_add(&pooled_launches, 1, __ATOMIC_RELAXED);

  in_task = 1;
  if (flambda(0, &job_env, cdata) != 0) __atomic_fetch_add(&failed, 1, __ATOMIC_RELAXED);
  in_task = 0;
  __atomic_fetch_add(&done, 1, __ATOMIC_RELEASE);
  run_tasks(gen); /* then whatever no worker has started */
  /* Every task is taken; wait for the ones workers run. */
  int spins = 0;
  while (__atomic_load_n(&done, __ATOMIC_ACQUIRE) < num_task) {
    if (++spins < 20000) cpu_relax();
    else sched_yield(); /* a worker preempted mid-task: let it have this core */
  }
  int bad = __atomic_load_n(&failed, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&pool_lock);
  if (bad) {
    report_failure(bad);
    return -1;
  }
  return 0;
}

/* -- control, for native_pool.py ---------------------------------------------------------- */

/* At most default_threads (TVM_NUM_THREADS, else the CPUs this process may use), as TVM caps its pool. */
void mlcwb_pool_set_threads(int n) { my_threads = n < 1 ? 1 : (n > default_threads ? default_threads : n); }
int mlcwb_pool_threads(void) { return my_threads > 0 ? my_threads : default_threads; }
void mlcwb_pool_set_enabled(int on) { __atomic_store_n(&enabled, on ? 1 : 0, __ATOMIC_RELAXED); }
int mlcwb_pool_enabled(void) { return __atomic_load_n(&enabled, __ATOMIC_RELAXED); }
uint64_t mlcwb_pool_launches(void) { return __atomic_load_n(&launches, __ATOMIC_RELAXED); }
uint64_t mlcwb_pool_pooled_launches(void) { return __atomic_load_n(&pooled_launches, __ATOMIC_RELAXED); }

static void after_fork_child(void) {
  /* The child has no workers: start afresh (a launch in progress in the parent is not ours). */
  pthread_mutex_init(&pool_lock, NULL);
  workers = 0;
  sleepers = 0;
}

__attribute__((constructor)) static void init(void) {
  cpu_set_t set;
  int n = 0;
  if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
  const char* env = getenv("TVM_NUM_THREADS");
  if (env && atoi(env) > 0) n = atoi(env);
  default_threads = n > 0 ? (n > MAX_THREADS ? MAX_THREADS : n) : 1;
  const char* spin = getenv("WORKBENCH_POOL_SPIN_US");
  if (spin && atoi(spin) >= 0) spin_us = atoi(spin);
  pthread_atfork(NULL, NULL, after_fork_child);
}
