// Execution runtime of the LEAP-JAX `cpu` backend: runs a CUDA launch grid on one OS thread.
//
// Blocks run one after another. Inside a block, a kernel without barriers / warp operations runs
// its threads as a plain loop (fast path); otherwise every thread is a fiber with its own small
// stack, and a scheduler resumes the fibers in passes: a fiber runs until it reaches a barrier, a
// warp operation or its end. __syncthreads releases when every live thread of the block waits;
// a warp operation (shuffle, vote, __syncwarp, __reduce_*) releases when the live lanes of its mask
// wait, and the scheduler computes every lane's result from the values the lanes deposited.
// The thread order of a pass changes with a per-launch `order` value (forward,
// reverse, interleaved) so that a missing barrier shows up as a wrong answer, as on a GPU.
// Faults (SIGSEGV/SIGBUS: guard pages around buffers), SIGFPE, SIGABRT, __trap() and a CPU-time
// timer (hangs) end the launch through siglongjmp back to __cpu_launch, which returns an error code.
#pragma once
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <pthread.h>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#ifndef sigev_notify_thread_id
#define sigev_notify_thread_id _sigev_un._tid
#endif


namespace __cpu {
enum { ST_READY = 0, ST_BLOCK = 1, ST_WARP = 2, ST_DONE = 3 };
enum { E_OK = 0, E_FAULT = 1, E_TIMEOUT = 2, E_TRAP = 3, E_FPE = 4, E_STACK = 5, E_CONFIG = 6,
       E_ABORT = 7, E_ILL = 8, E_SMEM = 9 };

struct Fiber {
  void* sp;
#if !defined(__x86_64__)
  ucontext_t uc;
#endif
  int state;
  uint3 tid;
  unsigned mask;
  unsigned long long val;
  int src, pred, op, bpred, bcount;
  WarpOut out;
};

static const size_t kStack = 64 * 1024;   // usable stack per fiber
static const size_t kSmem = 256 * 1024;   // dynamic shared memory window (H200 max is 227 KiB)
}  // namespace __cpu

// Globals with external (hidden) linkage, so the compiler cannot assume a context switch leaves them alone.
LEAP_HIDDEN __cpu::Fiber* __cpu_fibers;
LEAP_HIDDEN int __cpu_fiber_cap;
LEAP_HIDDEN char* __cpu_stack_region;
LEAP_HIDDEN size_t __cpu_stack_slot;
LEAP_HIDDEN size_t __cpu_page;
LEAP_HIDDEN void* __cpu_sched_sp;
#if !defined(__x86_64__)
LEAP_HIDDEN ucontext_t __cpu_sched_uc;
#endif
LEAP_HIDDEN __cpu::Fiber* __cpu_cur;
LEAP_HIDDEN void (*__cpu_entry)(void**);
LEAP_HIDDEN void** __cpu_args;
LEAP_HIDDEN int __cpu_mode_fibers;
LEAP_HIDDEN int __cpu_nthreads;
LEAP_HIDDEN sigjmp_buf __cpu_jmp;
LEAP_HIDDEN volatile sig_atomic_t __cpu_armed;
LEAP_HIDDEN pthread_t __cpu_thread;
LEAP_HIDDEN volatile int __cpu_err;
LEAP_HIDDEN void* volatile __cpu_addr;
LEAP_HIDDEN const char* volatile __cpu_msg;
LEAP_HIDDEN unsigned long long __cpu_clock;
LEAP_HIDDEN unsigned char* __cpu_smem_region;
LEAP_HIDDEN timer_t __cpu_timer;
LEAP_HIDDEN int __cpu_timer_ok;
LEAP_HIDDEN int* __cpu_order;
LEAP_HIDDEN int __cpu_order_cap;

#if defined(__x86_64__)
// void __cpu_swap(void** save_sp, void* new_sp): save callee-saved registers, MXCSR and the x87
// control word on the current stack, store its pointer, switch to new_sp and restore from there.
asm(".text\n"
    ".p2align 4\n"
    ".hidden __cpu_swap\n"
    ".globl __cpu_swap\n"
    ".type __cpu_swap,@function\n"
    "__cpu_swap:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  subq $8, %rsp\n  stmxcsr (%rsp)\n  fnstcw 4(%rsp)\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  ldmxcsr (%rsp)\n  fldcw 4(%rsp)\n  addq $8, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size __cpu_swap, .-__cpu_swap\n");
extern "C" void __cpu_swap(void** save_sp, void* new_sp);
#endif

namespace __cpu {

static void fiber_main() {
  __cpu_entry(__cpu_args);
  __cpu_cur->state = ST_DONE;
#if defined(__x86_64__)
  __cpu_swap(&__cpu_cur->sp, __cpu_sched_sp);
#else
  swapcontext(&__cpu_cur->uc, &__cpu_sched_uc);
#endif
  __builtin_trap();
}

// From a fiber back to the scheduler; returns when the scheduler resumes this fiber.
static inline void yield_to_scheduler(Fiber* f) {
  asm volatile("" ::: "memory");
#if defined(__x86_64__)
  __cpu_swap(&f->sp, __cpu_sched_sp);
#else
  swapcontext(&f->uc, &__cpu_sched_uc);
#endif
  asm volatile("" ::: "memory");
}

static inline void resume(Fiber* f) {
  __cpu_cur = f;
  threadIdx = f->tid;
  asm volatile("" ::: "memory");
#if defined(__x86_64__)
  __cpu_swap(&__cpu_sched_sp, f->sp);
#else
  swapcontext(&__cpu_sched_uc, &f->uc);
#endif
  asm volatile("" ::: "memory");
}

static void init_fiber(Fiber* f, int i) {
  char* lo = __cpu_stack_region + (size_t)i * __cpu_stack_slot + __cpu_page;  // above the guard page
#if defined(__x86_64__)
  uintptr_t top = ((uintptr_t)(lo + kStack)) & ~(uintptr_t)15;
  uint64_t* sp = (uint64_t*)top;
  unsigned int mxcsr = __builtin_ia32_stmxcsr();
  unsigned short fcw; asm volatile("fnstcw %0" : "=m"(fcw));
  *--sp = 0;                                   // fake return address of fiber_main
  *--sp = (uint64_t)(uintptr_t)&fiber_main;   // popped by `ret` in __cpu_swap
  for (int k = 0; k < 6; ++k) *--sp = 0;      // rbp rbx r12 r13 r14 r15
  *--sp = (uint64_t)mxcsr | ((uint64_t)fcw << 32);
  f->sp = sp;
#else
  getcontext(&f->uc);
  f->uc.uc_stack.ss_sp = lo;
  f->uc.uc_stack.ss_size = kStack;
  f->uc.uc_link = nullptr;
  makecontext(&f->uc, (void (*)())fiber_main, 0);
#endif
}

static bool ensure_fibers(int n) {
  if (n <= __cpu_fiber_cap) return true;
  if (__cpu_stack_region) munmap(__cpu_stack_region, (size_t)__cpu_fiber_cap * __cpu_stack_slot);
  free(__cpu_fibers);
  __cpu_fiber_cap = 0; __cpu_stack_region = nullptr;
  __cpu_fibers = (Fiber*)calloc((size_t)n, sizeof(Fiber));
  __cpu_stack_slot = kStack + __cpu_page;
  void* r = mmap(nullptr, (size_t)n * __cpu_stack_slot, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (r == MAP_FAILED || !__cpu_fibers) return false;
  __cpu_stack_region = (char*)r;
  for (int i = 0; i < n; ++i) mprotect(__cpu_stack_region + (size_t)i * __cpu_stack_slot, __cpu_page, PROT_NONE);
  __cpu_fiber_cap = n;
  return true;
}

// ---- device-side hooks (declared in cuda_prelude.h) --------------------------------------------
[[noreturn]] static void trap(const char* why) {
  __cpu_err = E_TRAP;
  __cpu_msg = why;
  __cpu_armed = 0;
  siglongjmp(__cpu_jmp, 1);
}

static int block_sync(int pred) {
  if (!__cpu_mode_fibers) trap("internal: __syncthreads reached on the no-barrier fast path");
  Fiber* f = __cpu_cur;
  f->state = ST_BLOCK; f->bpred = pred;
  yield_to_scheduler(f);
  return f->bcount;
}

static int block_alive() {
  if (!__cpu_mode_fibers) return __cpu_nthreads;
  int n = 0;
  for (int i = 0; i < __cpu_nthreads; ++i) n += __cpu_fibers[i].state != ST_DONE;
  return n;
}

static WarpOut warp_sync(unsigned mask, unsigned long long value, int src, int pred, int op) {
  if (!__cpu_mode_fibers) trap("internal: warp operation reached on the no-barrier fast path");
  Fiber* f = __cpu_cur;
  f->state = ST_WARP; f->mask = mask; f->val = value; f->src = src; f->pred = pred; f->op = op;
  yield_to_scheduler(f);
  return f->out;
}

static unsigned active_mask() {
  int lt = linear_tid(), w0 = lt & ~31;
  unsigned m = 0;
  for (int l = 0; l < 32 && w0 + l < __cpu_nthreads; ++l)
    if (!__cpu_mode_fibers || __cpu_fibers[w0 + l].state != ST_DONE) m |= 1u << l;
  return m;
}

static unsigned long long clock_tick() { return __cpu_clock += 64; }

// Release the lanes of warp `w` whose mask's live lanes all wait (or every waiting lane if `force`).
static int release_warp(int w, bool force) {
  int base = w * 32, n = __cpu_nthreads - base < 32 ? __cpu_nthreads - base : 32;
  unsigned alive = 0, waiting = 0;
  for (int l = 0; l < n; ++l) {
    Fiber* f = &__cpu_fibers[base + l];
    if (f->state != ST_DONE) alive |= 1u << l;
    if (f->state == ST_WARP) waiting |= 1u << l;
  }
  if (!waiting) return 0;
  unsigned rel = 0;
  for (int l = 0; l < n; ++l) {
    if (!(waiting >> l & 1)) continue;
    unsigned need = (__cpu_fibers[base + l].mask | (1u << l)) & alive;
    if (force || (need & ~waiting) == 0) rel |= 1u << l;
  }
  if (!rel) return 0;
  for (int l = 0; l < n; ++l) {
    if (!(rel >> l & 1)) continue;
    Fiber* f = &__cpu_fibers[base + l];
    unsigned part = (f->mask | (1u << l)) & rel;
    unsigned ballot = 0;
    unsigned long long acc = f->val;
    bool first = true;
    for (int j = 0; j < n; ++j) {
      if (!(part >> j & 1)) continue;
      Fiber* g = &__cpu_fibers[base + j];
      if (g->pred) ballot |= 1u << j;
      unsigned v = (unsigned)g->val;
      unsigned a = (unsigned)acc;
      if (first) { acc = v; first = false; continue; }
      switch (f->op) {
        case W_REDUCE_ADD: acc = a + v; break;
        case W_REDUCE_MIN: acc = (unsigned)((int)v < (int)a ? v : a); break;
        case W_REDUCE_MAX: acc = (unsigned)((int)v > (int)a ? v : a); break;
        case W_REDUCE_UMIN: acc = v < a ? v : a; break;
        case W_REDUCE_UMAX: acc = v > a ? v : a; break;
        case W_REDUCE_AND: acc = a & v; break;
        case W_REDUCE_OR: acc = a | v; break;
        case W_REDUCE_XOR: acc = a ^ v; break;
        default: break;
      }
    }
    f->out.ballot = ballot;
    f->out.participants = part;
    if (f->op == W_EXCHANGE) {
      int sl = f->src;  // a lane number within the warp
      if (sl >= 0 && sl < n && (waiting >> sl & 1)) f->out.value = __cpu_fibers[base + sl].val;
      else f->out.value = f->val;  // inactive or missing source lane: the lane keeps its own value
    } else {
      f->out.value = acc;
    }
  }
  for (int l = 0; l < n; ++l)
    if (rel >> l & 1) __cpu_fibers[base + l].state = ST_READY;
  return __builtin_popcount(rel);
}

static void run_block_fibers(int n, const int* order) {
  for (int i = 0; i < n; ++i) {
    Fiber* f = &__cpu_fibers[i];
    init_fiber(f, i);
    f->state = ST_READY;
    f->tid = uint3{(unsigned)(i % blockDim.x), (unsigned)((i / blockDim.x) % blockDim.y),
                   (unsigned)(i / (blockDim.x * blockDim.y))};
  }
  int nwarps = (n + 31) / 32;
  for (;;) {
    for (int k = 0; k < n; ++k) {
      Fiber* f = &__cpu_fibers[order[k]];
      if (f->state == ST_READY) resume(f);
    }
    int alive = 0, at_block = 0, at_warp = 0, count = 0;
    for (int i = 0; i < n; ++i) {
      Fiber* f = &__cpu_fibers[i];
      if (f->state == ST_DONE) continue;
      ++alive;
      if (f->state == ST_BLOCK) { ++at_block; count += f->bpred != 0; }
      else if (f->state == ST_WARP) ++at_warp;
    }
    if (alive == 0) return;
    int released = 0;
    if (at_warp)
      for (int w = 0; w < nwarps; ++w) released += release_warp(w, false);
    if (!released && at_block == alive) {
      for (int i = 0; i < n; ++i) {
        Fiber* f = &__cpu_fibers[i];
        if (f->state == ST_BLOCK) { f->bcount = count; f->state = ST_READY; }
      }
      released = alive;
    }
    if (!released)  // warp operations that wait on lanes stuck at __syncthreads: undefined on a GPU
      for (int w = 0; w < nwarps; ++w) release_warp(w, true);
  }
}

static const int kSigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
static const int kNSigs = 5;
static struct sigaction g_old_act[kNSigs + 1];

static int timer_signal() { return SIGRTMIN + 5; }

static void on_signal(int sig, siginfo_t* si, void*) {
  if (!__cpu_armed || !pthread_equal(pthread_self(), __cpu_thread)) {
    if (sig == timer_signal()) return;
    for (int i = 0; i < kNSigs; ++i)  // not ours: hand the signal to the previous handler next time
      if (kSigs[i] == sig) sigaction(sig, &g_old_act[i], nullptr);
    return;
  }
  __cpu_armed = 0;
  __cpu_addr = si ? si->si_addr : nullptr;
  int e = E_FAULT;
  if (sig == timer_signal()) e = E_TIMEOUT;
  else if (sig == SIGFPE) e = E_FPE;
  else if (sig == SIGABRT) e = E_ABORT;
  else if (sig == SIGILL) e = E_ILL;
  else if (__cpu_smem_region && (char*)__cpu_addr >= (char*)__cpu_smem_region + kSmem &&
           (char*)__cpu_addr < (char*)__cpu_smem_region + kSmem + __cpu_page)
    e = E_SMEM;
  else if (__cpu_mode_fibers && __cpu_stack_region) {
    char* a = (char*)__cpu_addr;
    if (a >= __cpu_stack_region && a < __cpu_stack_region + (size_t)__cpu_fiber_cap * __cpu_stack_slot &&
        (size_t)(a - __cpu_stack_region) % __cpu_stack_slot < __cpu_page)
      e = E_STACK;
  }
  __cpu_err = e;
  siglongjmp(__cpu_jmp, 1);
}

static thread_local char* t_altstack;
static const size_t kAltStack = 64 * 1024;

// Blocks always run in ascending order: an out-of-bounds grid-wide pattern then reaches the guard
// pages right after a buffer before it can reach memory further away.
static void run_grid(int use_fibers) {
  long long nb = (long long)gridDim.x * gridDim.y * gridDim.z;
  int n = __cpu_nthreads;
  for (long long b = 0; b < nb; ++b) {
    blockIdx = uint3{(unsigned)(b % gridDim.x), (unsigned)((b / gridDim.x) % gridDim.y),
                     (unsigned)(b / ((long long)gridDim.x * gridDim.y))};
    if (use_fibers) {
      __cpu_mode_fibers = 1;
      run_block_fibers(n, __cpu_order);
      __cpu_mode_fibers = 0;
    } else {
      for (int t = 0; t < n; ++t) {
        int i = __cpu_order[t];
        threadIdx = uint3{(unsigned)(i % blockDim.x), (unsigned)((i / blockDim.x) % blockDim.y),
                          (unsigned)(i / (blockDim.x * blockDim.y))};
        __cpu_entry(__cpu_args);
      }
    }
  }
}

}  // namespace __cpu

// Run one launch. dims = {gx, gy, gz, bx, by, bz}. Returns an E_* code; `msg` gets a description.
extern "C" __attribute__((visibility("default"))) int __cpu_launch(
    void (*entry)(void**), void** args, const long long* dims, long long shared_bytes, int use_fibers,
    int order, double timeout_s, char* msg, int msglen, unsigned long long* fault_addr) {
  using namespace __cpu;
  msg[0] = 0;
  *fault_addr = 0;
  if (!__cpu_page) __cpu_page = (size_t)sysconf(_SC_PAGESIZE);
  gridDim = dim3((unsigned)dims[0], (unsigned)dims[1], (unsigned)dims[2]);
  blockDim = dim3((unsigned)dims[3], (unsigned)dims[4], (unsigned)dims[5]);
  int n = (int)(dims[3] * dims[4] * dims[5]);
  __cpu_nthreads = n;
  if (shared_bytes < 0 || (size_t)shared_bytes > kSmem) {
    snprintf(msg, msglen, "dynamic shared memory of %lld bytes exceeds the %zu-byte limit", shared_bytes, kSmem);
    return E_CONFIG;
  }
  if (!__cpu_smem_region) {  // the window is followed by a guard page: reads past the end fault
    void* r = mmap(nullptr, kSmem + __cpu_page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (r == MAP_FAILED) { snprintf(msg, msglen, "cannot map shared memory"); return E_CONFIG; }
    __cpu_smem_region = (unsigned char*)r;
    mprotect(__cpu_smem_region + kSmem, __cpu_page, PROT_NONE);
  }
  __cpu_dyn_smem = __cpu_smem_region + kSmem - (((size_t)shared_bytes + 15) & ~(size_t)15);
  if (use_fibers && !ensure_fibers(n)) { snprintf(msg, msglen, "cannot allocate %d fiber stacks", n); return E_CONFIG; }
  if (n > __cpu_order_cap) {
    free(__cpu_order);
    __cpu_order = (int*)malloc(sizeof(int) * (size_t)n);
    __cpu_order_cap = n;
  }
  int mode = order % 3, k = 0;
  if (mode == 0) for (int i = 0; i < n; ++i) __cpu_order[k++] = i;
  else if (mode == 1) for (int i = n - 1; i >= 0; --i) __cpu_order[k++] = i;
  else { for (int i = 1; i < n; i += 2) __cpu_order[k++] = i; for (int i = 0; i < n; i += 2) __cpu_order[k++] = i; }
  __cpu_entry = entry;
  __cpu_args = args;
  __cpu_err = E_OK;
  __cpu_msg = nullptr;
  __cpu_addr = nullptr;
  __cpu_mode_fibers = 0;
  __cpu_thread = pthread_self();

  if (!t_altstack) {
    void* r = mmap(nullptr, kAltStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (r != MAP_FAILED) t_altstack = (char*)r;
  }
  stack_t ss, old_ss;
  memset(&ss, 0, sizeof ss);
  ss.ss_sp = t_altstack; ss.ss_size = kAltStack; ss.ss_flags = 0;
  sigaltstack(&ss, &old_ss);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_signal;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < kNSigs; ++i) sigaction(kSigs[i], &sa, &g_old_act[i]);
  sigaction(timer_signal(), &sa, &g_old_act[kNSigs]);
  __cpu_timer_ok = 0;
  if (timeout_s > 0) {
    struct sigevent sev;
    memset(&sev, 0, sizeof sev);
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = timer_signal();
    sev.sigev_notify_thread_id = (pid_t)syscall(SYS_gettid);
    if (timer_create(CLOCK_THREAD_CPUTIME_ID, &sev, &__cpu_timer) == 0) {
      __cpu_timer_ok = 1;
      struct itimerspec its;
      memset(&its, 0, sizeof its);
      its.it_value.tv_sec = (time_t)timeout_s;
      its.it_value.tv_nsec = (long)((timeout_s - (double)(time_t)timeout_s) * 1e9);
      if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0) its.it_value.tv_nsec = 1;
      timer_settime(__cpu_timer, 0, &its, nullptr);
    }
  }
  if (sigsetjmp(__cpu_jmp, 1) == 0) {
    __cpu_armed = 1;
    run_grid(use_fibers);
    __cpu_armed = 0;
  }
  __cpu_armed = 0;
  if (__cpu_timer_ok) timer_delete(__cpu_timer);
  __cpu_timer_ok = 0;
  for (int i = 0; i < kNSigs; ++i) sigaction(kSigs[i], &g_old_act[i], nullptr);
  sigaction(timer_signal(), &g_old_act[kNSigs], nullptr);
  if (old_ss.ss_flags & SS_DISABLE) { stack_t d; memset(&d, 0, sizeof d); d.ss_flags = SS_DISABLE; sigaltstack(&d, nullptr); }
  else { old_ss.ss_flags = 0; sigaltstack(&old_ss, nullptr); }

  int err = __cpu_err;
  bool fib = __cpu_mode_fibers;
  __cpu_mode_fibers = 0;
  *fault_addr = (unsigned long long)(uintptr_t)__cpu_addr;
  const char* where_fmt = "block (%u,%u,%u) thread (%u,%u,%u)";
  char where[96];
  snprintf(where, sizeof where, where_fmt, blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z);
  (void)fib;
  switch (err) {
    case E_OK: break;
    case E_FAULT: snprintf(msg, msglen, "illegal memory access at address 0x%llx in %s", (unsigned long long)(uintptr_t)__cpu_addr, where); break;
    case E_STACK: snprintf(msg, msglen, "stack overflow (more than %zu KiB of local memory per thread) in %s", kStack / 1024, where); break;
    case E_TIMEOUT: snprintf(msg, msglen, "the kernel ran longer than %.1f s of CPU time (hang?) in %s", timeout_s, where); break;
    case E_TRAP: snprintf(msg, msglen, "%s in %s", __cpu_msg ? __cpu_msg : "trap", where); break;
    case E_FPE: snprintf(msg, msglen, "arithmetic exception (integer division by zero or overflow) in %s", where); break;
    case E_ABORT: snprintf(msg, msglen, "abort() called in device code in %s", where); break;
    case E_SMEM: snprintf(msg, msglen, "illegal memory access: past the end of the %lld bytes of dynamic shared memory (extern __shared__) in %s", shared_bytes, where); break;
    case E_ILL: snprintf(msg, msglen, "misaligned address or illegal instruction in %s (a vector or "
                                      "wide load/store at an address not aligned to its size?)", where); break;
    default: snprintf(msg, msglen, "unknown error %d", err); break;
  }
  return err;
}

namespace __cpu {
template <class... A, size_t... I>
static inline void invoke_impl(void (*f)(A...), void** a, std::index_sequence<I...>) {
  f(*static_cast<typename std::remove_cv<typename std::remove_reference<A>::type>::type*>(a[I])...);
}
template <class... A>
static inline void invoke(void (*f)(A...), void** a) { invoke_impl(f, a, std::index_sequence_for<A...>{}); }
}  // namespace __cpu
