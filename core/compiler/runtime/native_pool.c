/* The workbench's parallel launch for TVM's CPU code: TVMBackendParallelLaunch with workers that
 * poll with the pause instruction and tasks that any thread may take.
 *
 * Why: TVM 0.27's pool (src/runtime/thread_pool.cc) costs several times more a parallel region on a
 * 2-vCPU KVM guest, because both sides poll with one sched_yield() system call per look, than a
 * region here, whose workers poll with pause (docs/performance.md: The workbench's parallel
 * launch). And TVM gives task i to thread i: when another process holds a worker's core, every
 * kernel waits for that worker. Here the calling thread runs task 0 and then
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

#define MAX_TASKS 1024
#define MAX_CHUNKS 16

/* The job: written by the launching thread while it holds the pool, read by the workers.
 *
 * A parallel loop is cut into `chunks` tasks per thread (TVM's compiled lambda splits its loop by
 * env.num_task: task i runs rows [i*step, (i+1)*step), step = ceil(extent / num_task)), and each
 * taking thread owns one contiguous run of tasks: the caller the first, worker w the (w+1)-th. An
 * owner runs its own tasks front to back; a thread whose run is done takes the others' remaining
 * tasks from their back. On a quiet machine every thread finishes its own run at about the same
 * time, so each core computes the same rows of every kernel, as when a loop was cut into one task a
 * thread (a kernel reads in its cache what the same core wrote in the last one). When a core is
 * slow (a worker descheduled, a virtual CPU whose physical core is shared with another guest or
 * hyperthread), the fast ones take the tail of its run instead of waiting for all of it. That
 * helped in the spells when 2-thread runs slow down (see "one thread or all" below) and cost little
 * on a quiet machine, but beside onnxruntime's processes one model lost its second core's gain
 * with it, for a reason not found; so the default stays one task a thread (WORKBENCH_POOL_CHUNKS,
 * set_chunks), and the run-by-run choice below is what meets the spells. (docs/performance.md:
 * Tasks per thread)
 *
 * Each run is one word packing generation (24 bits), next task (20) and end (20): an owner takes
 * from the front, a thief from the back, each with one compare-and-swap, so a worker that slept
 * through a job's end cannot take a task of the next job with the previous job's function. */
typedef struct {
  uint64_t word; /* atomic */
  char pad[56];
} TaskRun;
static FTVMParallelLambda job_fn;
static void* job_cdata;
static TVMParallelGroupEnv job_env;
static int job_helpers;                 /* workers that may join this job */
static int job_runs;                    /* runs of tasks: job_helpers + 1 */
static TaskRun runs[MAX_THREADS] __attribute__((aligned(64)));
static uint32_t generation;             /* atomic; the futex word workers sleep on */
static int32_t done;                    /* atomic: tasks finished */
static int32_t failed;                  /* atomic: tasks that returned nonzero */
static int32_t sleepers;                /* atomic: workers in futex_wait */
static int sync_ints[MAX_TASKS * SYNC_STRIDE] __attribute__((aligned(64)));

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static int workers;                     /* started; guarded by pool_lock */
static int default_threads;             /* threads for a calling thread that set none */
static int spin_us = 2000;              /* how long an idle worker polls before it sleeps */
/* For the first PAUSE_NS of it the worker polls with pause alone (the gap between a run's kernels,
 * and between runs of a timing loop, is shorter: docs/performance.md, The workbench's parallel
 * launch); after that with a sched_yield between looks, so the other threads of this process (a
 * compile's build threads) and other processes get the core as they would from TVM's pool, which
 * yields from the first look. */
#define PAUSE_NS 100000ull
static int enabled = 1;
/* Tasks per thread of a parallel loop (see the job above). 1 cuts a loop into one task a thread,
 * as TVM's pool does. */
static int chunks = 1;
static uint64_t pooled_launches;        /* atomic: launches that used the workers */
static uint64_t launches;               /* atomic: every launch through this library */
static LaunchFn tvm_launch;             /* TVM's own, for enabled == 0 (find_tvm_runtime) */

/* Bumped when a run goes on one thread (mlcwb_pool_run_begin): idle workers sleep at once instead
 * of polling for spin_us. Polling, a worker takes from the caller's run what a hyperthread sibling
 * takes (the spells "one thread or all" is for), and a one-thread trial measured with it is slow. */
static uint32_t quiesce;
static __thread int my_threads;         /* 0: default_threads */
static __thread int run_using;          /* >0: this run's threads, chosen by mlcwb_pool_run_begin */
static __thread int in_task;            /* a launch from inside a task runs serially */

static inline void cpu_relax(void) { __builtin_ia32_pause(); }

static inline uint64_t pack(uint32_t gen, uint32_t next, uint32_t end) {
  return ((uint64_t)(gen & 0xFFFFFF) << 40) | ((uint64_t)(next & 0xFFFFF) << 20) | (end & 0xFFFFF);
}
static inline uint32_t run_gen(uint64_t c) { return (uint32_t)(c >> 40); }
static inline uint32_t run_next(uint64_t c) { return (uint32_t)((c >> 20) & 0xFFFFF); }
static inline uint32_t run_end(uint64_t c) { return (uint32_t)(c & 0xFFFFF); }

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void run_task(FTVMParallelLambda fn, void* cdata, int task) {
  in_task = 1;
  int rc = fn(task, &job_env, cdata);
  in_task = 0;
  if (rc != 0) __atomic_fetch_add(&failed, 1, __ATOMIC_RELAXED);
  __atomic_fetch_add(&done, 1, __ATOMIC_RELEASE);
}

/* Take one task of generation `gen` from run `r`: its front (`own`) or its back; -1 when none is
 * left (or the run belongs to another job). */
static int take(uint32_t gen, int r, int own, FTVMParallelLambda* fn, void** cdata) {
  uint64_t c = __atomic_load_n(&runs[r].word, __ATOMIC_ACQUIRE);
  for (;;) {
    uint32_t next = run_next(c), end = run_end(c);
    if (run_gen(c) != (gen & 0xFFFFFF) || next >= end) return -1;
    *fn = job_fn; /* read after a word of this job: valid if the claim succeeds */
    *cdata = job_cdata;
    uint64_t want = own ? pack(gen, next + 1, end) : pack(gen, next, end - 1);
    if (__atomic_compare_exchange_n(&runs[r].word, &c, want, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
      return (int)(own ? next : end - 1);
  }
}

/* Run this thread's own run `self` front to back, then the others' remaining tasks from their
 * back, until no task of generation `gen` is left; returns how many it ran. */
static int run_tasks(uint32_t gen, int self) {
  int ran = 0, task, nruns = __atomic_load_n(&job_runs, __ATOMIC_ACQUIRE);
  FTVMParallelLambda fn;
  void* cdata;
  while ((task = take(gen, self, 1, &fn, &cdata)) >= 0) {
    run_task(fn, cdata, task);
    ran++;
  }
  for (int i = 1; i < nruns; ++i) { /* runs only shrink: one pass over the others finds every task */
    int victim = (self + i) % nruns;
    while ((task = take(gen, victim, 0, &fn, &cdata)) >= 0) {
      run_task(fn, cdata, task);
      ran++;
    }
  }
  return ran;
}

static void* worker_main(void* arg) {
  int index = (int)(intptr_t)arg;
  uint32_t seen = __atomic_load_n(&generation, __ATOMIC_ACQUIRE);
  for (;;) {
    uint64_t start = now_ns();
    uint64_t limit = (uint64_t)__atomic_load_n(&spin_us, __ATOMIC_RELAXED) * 1000ull;
    uint32_t quiet = __atomic_load_n(&quiesce, __ATOMIC_RELAXED);
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
      if (idle > limit || __atomic_load_n(&quiesce, __ATOMIC_RELAXED) != quiet) {
        __atomic_fetch_add(&sleepers, 1, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&generation, __ATOMIC_SEQ_CST) == seen)
          syscall(SYS_futex, &generation, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
        __atomic_fetch_sub(&sleepers, 1, __ATOMIC_SEQ_CST);
        start = now_ns();
        quiet = __atomic_load_n(&quiesce, __ATOMIC_RELAXED);
        yielding = 0;
      }
    }
    seen = g;
    if (index < __atomic_load_n(&job_helpers, __ATOMIC_ACQUIRE)) run_tasks(g, index + 1);
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
  if (run_using > 0 && run_using < threads) threads = run_using;
  if (threads > MAX_THREADS) threads = MAX_THREADS;
  if (threads <= 1) return run_serially(flambda, cdata, num_task > 0 ? num_task : 1); /* as TVM: one task when one thread */
  if (num_task <= 0) { /* TVM's compiled parallel loops: cut by the pool */
    int per_thread = __atomic_load_n(&chunks, __ATOMIC_RELAXED);
    num_task = threads * per_thread;
  }
  if (num_task > MAX_TASKS) num_task = MAX_TASKS; /* the lambda splits by env.num_task */
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
  __atomic_store_n(&job_runs, helpers + 1, __ATOMIC_RELEASE);
  uint32_t gen = (__atomic_load_n(&generation, __ATOMIC_RELAXED) + 1) & 0xFFFFFF;
  /* Run r of the helpers + 1 runs holds tasks [r * num_task / runs, (r + 1) * num_task / runs):
   * the caller the first rows, worker w the (w + 1)-th share. Fixed owners, not first come: claimed
   * first come, the shares swapped from kernel to kernel whenever a worker saw the launch before the
   * caller claimed, and resnet50 and inception_v1 ran 4-6% slower at 2 threads than with TVM's pool
   * (benchmarks/parallel.py --mode split, variant tvm-pool). */
  int nruns = helpers + 1;
  for (int r = 0; r < nruns; ++r) {
    uint32_t lo = (uint32_t)((int64_t)r * num_task / nruns), hi = (uint32_t)((int64_t)(r + 1) * num_task / nruns);
    __atomic_store_n(&runs[r].word, pack(gen, lo, hi), __ATOMIC_RELEASE);
  }
  __atomic_store_n(&generation, gen, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&sleepers, __ATOMIC_SEQ_CST) > 0)
    syscall(SYS_futex, &generation, FUTEX_WAKE_PRIVATE, helpers, NULL, NULL, 0);
  __atomic_fetch_add(&pooled_launches, 1, __ATOMIC_RELAXED);

  run_tasks(gen, 0); /* its own run, then whatever the workers have not taken */
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

/* -- one thread or all, measured run by run --------------------------------------------------
 *
 * The schedules split a kernel over the threads where a quiet machine's cores run side by side.
 * On this project's 2-vCPU guest they often do not: in spells of seconds, 2-thread runs take twice
 * their time while 1-thread runs in the same rounds take theirs, and the guest shows nothing (no
 * steal time, nothing else runnable); the host presumably runs the two virtual CPUs on one
 * physical core's two hyperthreads. (docs/performance.md: One thread or all, run by run)
 *
 * So a caller that brackets each run with mlcwb_pool_run_begin / mlcwb_pool_run_end, with a state
 * of its own for each model and calling thread (the thread governor, core.compiler.runtime.threads, and
 * an exported artifact's run.py), has the runs timed, and runs a few on one thread as soon as the
 * runs on all n threads (the median of the last 8) have grown to within 10% of what one thread
 * takes (at most every 100 runs or 0.5 s); until one thread has been tried, that is guessed as
 * 0.9 n times the best runs on n, so a model whose threads pay is not tried on one at all while
 * its runs keep their speed (a first trial after the warm-up put 4 one-thread runs among the ~15
 * that benchmarks/compiled_vs_onnxruntime.py times of resnet50); runs under 1 ms, whose trial
 * costs nothing to speak of, are tried once after the warm-up. Once tried, one thread is tried
 * again every 2-30 s (the longer the dearer it is, so the trials cost ~0.4%). When one
 * thread measured 5% faster, runs take one thread, and all the threads are tried again after
 * 100 runs or 0.2 s, whichever comes first, then 200 runs or 0.4 s, ... up to 3,200 runs or 5 s
 * while one thread stays faster. A trial skips its first run (the worker waking, or still
 * polling on the other core) and takes the median of the next three. */
#define TRIAL_SKIP 1
#define TRIAL_RUNS 3
#define WARM_RUNS 5
#define RECENT 8 /* the last runs on n threads, whose median is what n threads take now */
typedef struct {
  int n;                     /* threads allowed (the calling thread's count) at the last run */
  int using;                 /* this run's threads */
  uint64_t t0;
  double est_n, est_1;       /* ns a run on n threads / on one: medians of trials and recent runs */
  double recent[RECENT];     /* the last runs on n threads (a ring) */
  double best_n;             /* the least est_n seen */
  int runs_n;                /* runs timed on n threads since the state began */
  int serial;                /* one thread measured faster: runs take one */
  int trial;                 /* threads on trial (0: none) */
  int trial_skip, trial_have;
  double trial_ns[TRIAL_RUNS];
  uint64_t next_trial;       /* serial: next trial of n; else next trial of one */
  uint64_t last_trial;
  uint64_t hold;             /* serial: time before the next trial of n ... */
  uint32_t hold_runs;        /* ... or runs, whichever comes first */
  uint32_t since_trial;      /* runs since the last trial */
  uint64_t last_end;         /* when the last run ended */
  uint64_t warm_until;       /* runs that begin before this are not timed ... */
  int cold;                  /* ... nor this many more */
} RunChoice;
static uint64_t one_thread_runs; /* atomic: runs the choice gave one thread */

#define MS_NS 1000000ull
/* After a gap of COLD_GAP between runs (a pause, other work), the first runs are slow (caches
 * refilled, cores woken), so runs that begin within COLD_WARMUP of the gap's end, and at least one,
 * are not timed: counted in, they made a one-thread trial measure "faster".
 * (docs/performance.md: COLD_GAP and COLD_WARMUP) */
#define COLD_GAP (50 * MS_NS)
#define COLD_WARMUP (10 * MS_NS)
static void start_trial(RunChoice* c, int threads, uint64_t now) {
  c->trial = threads;
  c->trial_skip = TRIAL_SKIP;
  c->trial_have = 0;
  c->last_trial = now;
  c->since_trial = 0;
}

static uint64_t one_thread_trial_every(const RunChoice* c) {
  double every = 1000.0 * (c->est_1 - c->est_n); /* 4 runs on one thread cost ~0.4% of the time between */
  if (every < 2000.0 * MS_NS) every = 2000.0 * MS_NS;
  if (every > 30000.0 * MS_NS) every = 30000.0 * MS_NS;
  return (uint64_t)every;
}

static int choose_run_threads(RunChoice* c, int n, uint64_t now) {
  if (n != c->n) { /* the governor changed the count: what was measured is another count's */
    memset(c, 0, sizeof *c);
    c->n = n;
  }
  if (n <= 1) return 1;
  if (c->trial) return c->trial;
  c->since_trial++;
  if (c->serial) {
    if (now >= c->next_trial || c->since_trial >= c->hold_runs) {
      start_trial(c, n, now);
      return n;
    }
    return 1;
  }
  if (c->runs_n < WARM_RUNS) return n;
  /* Before any trial, what one thread would take is guessed from the best runs on n: 0.9 n times
   * as long. So a model whose threads pay is not tried on one thread until its runs slow down. */
  double one = c->est_1 > 0 ? c->est_1 : 0.9 * n * c->best_n;
  int due = c->est_1 > 0 ? now >= c->next_trial : c->best_n < 1000000.0; /* runs under 1 ms: one trial costs nothing */
  int close = c->est_n > 0.9 * one && (now - c->last_trial >= 500 * MS_NS || c->since_trial >= 100);
  if (due || close) {
    start_trial(c, 1, now);
    return 1;
  }
  return n;
}

static double median_of(const double* values, int k) {
  double v[RECENT > TRIAL_RUNS ? RECENT : TRIAL_RUNS];
  memcpy(v, values, sizeof(double) * (size_t)k);
  for (int i = 1; i < k; ++i)
    for (int j = i; j > 0 && v[j - 1] > v[j]; --j) {
      double t = v[j]; v[j] = v[j - 1]; v[j - 1] = t;
    }
  return k % 2 ? v[k / 2] : 0.5 * (v[k / 2 - 1] + v[k / 2]);
}

static void record_run(RunChoice* c, double ns, uint64_t now) {
  if (c->n <= 1) return;
  if (c->trial && c->using == c->trial) {
    if (c->trial_skip > 0) {
      c->trial_skip--;
      return;
    }
    c->trial_ns[c->trial_have++] = ns;
    if (c->trial_have < TRIAL_RUNS) return;
    double m = median_of(c->trial_ns, TRIAL_RUNS);
    if (c->trial == 1) {
      c->est_1 = m;
      if (c->est_n > 0 && c->est_1 < 0.95 * c->est_n) {
        c->serial = 1;
        c->hold = 200 * MS_NS;
        c->hold_runs = 100;
        c->next_trial = now + c->hold;
      } else {
        c->next_trial = now + one_thread_trial_every(c);
      }
    } else {
      c->est_n = m;
      if (c->est_n < 0.95 * c->est_1) {
        c->serial = 0;
        for (int i = 0; i < RECENT; ++i) c->recent[i] = m; /* the ring starts from the trial */
        c->runs_n = RECENT;
        c->next_trial = now + one_thread_trial_every(c);
      } else {
        c->hold = c->hold * 2 > 5000 * MS_NS ? 5000 * MS_NS : c->hold * 2;
        c->hold_runs = c->hold_runs * 2 > 3200 ? 3200 : c->hold_runs * 2;
        c->next_trial = now + c->hold;
      }
    }
    c->trial = 0;
    return;
  }
  if (c->using == 1) { /* runs on one thread while it measured faster: a moving average */
    double capped = ns > 1.5 * c->est_1 ? 1.5 * c->est_1 : ns; /* one preempted run moves it a step */
    c->est_1 = c->est_1 == 0 ? ns : c->est_1 + 0.25 * (capped - c->est_1);
    return;
  }
  c->recent[c->runs_n % RECENT] = ns; /* a median: an outlier or three do not move it */
  c->runs_n++;
  c->est_n = median_of(c->recent, c->runs_n < RECENT ? c->runs_n : RECENT);
  if (c->runs_n >= WARM_RUNS && (c->best_n == 0 || c->est_n < c->best_n)) c->best_n = c->est_n;
}

/* Send the idle workers to sleep now (they wake at the next pooled launch). */
void mlcwb_pool_quiesce(void) { __atomic_fetch_add(&quiesce, 1, __ATOMIC_RELAXED); }
int mlcwb_pool_sleeping_workers(void) { return __atomic_load_n(&sleepers, __ATOMIC_SEQ_CST); }

/* The size of the state a caller keeps for each model it runs (and each thread it runs it on):
 * zeroed memory of this size is a fresh state. */
int mlcwb_pool_run_state_size(void) { return (int)sizeof(RunChoice); }

/* Before a run of the model whose state is `c`: the threads it takes (see above), in [1, the
 * calling thread's count]. */
static void begin_at(RunChoice* c, int n, uint64_t now) {
  if (c->t0) c->last_end = 0; /* the last run's end never came (it failed, its caller forgot): as after a pause */
  if (!c->last_end || now - c->last_end > COLD_GAP) {
    c->warm_until = now + COLD_WARMUP;
    c->cold = 1;
  }
  if (c->cold > 0 || now < c->warm_until) { /* untimed: no trial begins or goes on */
    if (n != c->n) {
      memset(c, 0, sizeof *c);
      c->n = n;
      c->warm_until = now + COLD_WARMUP;
      c->cold = 1;
    }
    c->trial = 0;
    c->using = n <= 1 || c->serial ? 1 : n;
  } else {
    c->using = choose_run_threads(c, n, now);
  }
  c->t0 = now;
}

static void end_at(RunChoice* c, uint64_t now) {
  if (c->cold > 0 || c->t0 < c->warm_until) {
    if (c->cold > 0) c->cold--;
  } else {
    record_run(c, (double)(now - c->t0), now);
  }
  c->last_end = now;
  c->t0 = 0;
}

int mlcwb_pool_run_begin(RunChoice* c) {
  int n = my_threads > 0 ? my_threads : default_threads;
  uint64_t now = now_ns();
  begin_at(c, n, now);
  if (c->using == 1 && n > 1) {
    __atomic_fetch_add(&one_thread_runs, 1, __ATOMIC_RELAXED);
    /* the workers sleep, when some do not yet: each bump makes the caller fetch a cache line the
     * polling workers read, and runs of one thread in a row need it once */
    if (__atomic_load_n(&sleepers, __ATOMIC_RELAXED) < __atomic_load_n(&workers, __ATOMIC_RELAXED)) mlcwb_pool_quiesce();
  }
  run_using = c->using;
  return c->using;
}

/* After the run mlcwb_pool_run_begin(c) began. */
void mlcwb_pool_run_end(RunChoice* c) {
  if (c->t0 && run_using) end_at(c, now_ns());
  c->t0 = 0;
  run_using = 0;
}

uint64_t mlcwb_pool_one_thread_runs(void) { return __atomic_load_n(&one_thread_runs, __ATOMIC_RELAXED); }

/* The choice on given run times, for tests: run i begins gap_ns[i] after the last one ended,
 * takes the threads the choice picks with `allowed[i]` threads allowed, and lasts many_ns[i] or
 * one_ns[i]; used[i] is what it took. */
void mlcwb_pool_simulate_runs(int count, const int* allowed, const double* gap_ns, const double* many_ns,
                              const double* one_ns, int* used) {
  RunChoice state, *c = &state;
  memset(c, 0, sizeof *c);
  double clock = 1e9;
  for (int i = 0; i < count; ++i) {
    clock += gap_ns[i];
    begin_at(c, allowed[i], (uint64_t)clock);
    clock += c->using == 1 ? one_ns[i] : many_ns[i];
    end_at(c, (uint64_t)clock);
    used[i] = c->using;
  }
}

/* -- control, for native_pool.py ---------------------------------------------------------- */

/* At most default_threads (TVM_NUM_THREADS, else the CPUs this process may use), as TVM caps its pool. */
void mlcwb_pool_set_threads(int n) { my_threads = n < 1 ? 1 : (n > default_threads ? default_threads : n); }
int mlcwb_pool_threads(void) { return my_threads > 0 ? my_threads : default_threads; }
void mlcwb_pool_set_chunks(int n) { __atomic_store_n(&chunks, n < 1 ? 1 : (n > MAX_CHUNKS ? MAX_CHUNKS : n), __ATOMIC_RELAXED); }
int mlcwb_pool_chunks(void) { return __atomic_load_n(&chunks, __ATOMIC_RELAXED); }
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
  const char* per_thread = getenv("WORKBENCH_POOL_CHUNKS");
  if (per_thread && atoi(per_thread) > 0) mlcwb_pool_set_chunks(atoi(per_thread));
  const char* spin = getenv("WORKBENCH_POOL_SPIN_US");
  if (spin && atoi(spin) >= 0) spin_us = atoi(spin);
  pthread_atfork(NULL, NULL, after_fork_child);
}
