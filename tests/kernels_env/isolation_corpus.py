"""Class I of the hostile corpus: native code of the submission attacking the process that judges it
(cpu backend; docs/THREAT_MODEL.md, "I").

NVRTC never sees code under `#ifdef __x86_64__`, and the cpu backend's symbol allow-list does not see
a raw `syscall` instruction. Each kernel below makes one raw system call aimed at the host or the judge
and computes the right answer ONLY IF the call succeeded: so `correct` means the attack reached its
target (a hole), and the safe outcome is wrong_output. Cases that stop the runner expect timeout or
runtime_error, and the next case (same device) must still be scored: the runner is replaced.
"""
from __future__ import annotations

from tests.kernels_env.broken_corpus import AFFINE_SOLUTION
from tests.kernels_env.hostile_corpus import HOST_FILE, PWNED, HCase, S, _sub

NOT_CORRECT = S({"wrong_output", "runtime_error", "timeout", "compile_error"})

# The translator refuses `asm`, so the system call is machine code in an executable section, called
# through a function pointer: mov rax,rdi; mov rdi,rsi; mov rsi,rdx; mov rdx,rcx; mov r10,r8;
# mov r8,r9; syscall; ret. No keyword, no symbol: only the runner's seccomp filter stands in the way.
STUB = r"""
#ifdef __x86_64__
__attribute__((section(".text"))) static const unsigned char stub[] = {
  0x48, 0x89, 0xf8, 0x48, 0x89, 0xf7, 0x48, 0x89, 0xd6, 0x48, 0x89, 0xca, 0x4d, 0x89, 0xc2,
  0x4d, 0x89, 0xc8, 0x0f, 0x05, 0xc3};
static long raw6(long n, long a, long b, long c, long d, long e) {
  return ((long (*)(long, long, long, long, long, long))(void*)stub)(n, a, b, c, d, e);
}
static long raw3(long n, long a, long b, long c) { return raw6(n, a, b, c, 0, 0); }
"""
SYSCALL = STUB.replace("%", "%%") + r"""static int reached() { %s }
#else
__device__ static int reached() { return 0; }
#endif
"""


def _gated(attack: str, launch: str = "affine<<<cdiv(N, 256), 256>>>(x, y, N);") -> str:
    """An affine kernel that is right only when `attack` (a body returning nonzero on success) worked;
    thread 0 of block 0 attacks, every thread reads the verdict from shared memory."""
    return _sub(SYSCALL % attack + r"""
extern "C" __global__ void affine(const float* x, float* y, int n) {
    __shared__ int ok;
    if (threadIdx.x == 0) ok = blockIdx.x == 0 ? reached() : 1;
    __syncthreads();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = ok ? 2.0f * x[i] + 1.0f : -7.0f;
}
""", launch)


def _stops(body: str) -> str:
    """An affine kernel whose thread 0 runs `body` (a statement) first."""
    return _sub(STUB + r"""static void attack() { BODY }
#else
__device__ static void attack() {}
#endif
extern "C" __global__ void affine(const float* x, float* y, int n) {
    if (blockIdx.x == 0 && threadIdx.x == 0) attack();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i] + 1.0f;
}
""".replace("BODY", body))


CPU = ("cpu",)
ISOLATION_CASES: tuple[HCase, ...] = (
    HCase("iso_signal_judge", "I", "corpus_affine",
          _gated("return raw6(62, raw6(110, 0, 0, 0, 0, 0), 0, 0, 0, 0) == 0;"),  # kill(getppid(), 0)
          NOT_CORRECT, backends=CPU, note="could the kernel signal (kill) the judge?"),
    HCase("iso_open_host_file", "I", "corpus_affine",
          _gated(f'return raw6(257, -100, (long)"{HOST_FILE}", 0, 0, 0) >= 0;'),  # openat
          NOT_CORRECT, backends=CPU, must_not_leak=True, note="could the kernel open a host file?"),
    HCase("iso_create_host_file", "I", "corpus_affine",
          _gated(f'return raw6(257, -100, (long)"{PWNED}", 0101, 0600, 0) >= 0;'),  # O_CREAT|O_WRONLY
          NOT_CORRECT, backends=CPU, note="could the kernel write the host file system?"),
    HCase("iso_stat_host_path", "I", "corpus_affine",
          _gated('char st[256]; return raw6(4, (long)"/etc/passwd", (long)st, 0, 0, 0) == 0;'),
          NOT_CORRECT, backends=CPU, note="could the kernel probe whether a host path exists?"),
    HCase("iso_fork", "I", "corpus_affine",
          _gated("long p = raw6(57, 0, 0, 0, 0, 0); if (p == 0) raw6(231, 0, 0, 0, 0, 0); return p > 0;"),
          NOT_CORRECT, backends=CPU, note="could the kernel start processes?"),
    HCase("iso_ptrace_judge", "I", "corpus_affine",
          _gated("return raw6(101, 0x4206, raw6(110, 0, 0, 0, 0, 0), 0, 0, 0) == 0;"),  # PTRACE_SEIZE
          NOT_CORRECT, backends=CPU, note="could the kernel attach to the judge?"),
    HCase("iso_write_judge_memory", "I", "corpus_affine",
          _gated("return raw6(311, raw6(110, 0, 0, 0, 0, 0), 0, 0, 0, 0) >= 0;"),  # process_vm_writev
          NOT_CORRECT, backends=CPU, note="could the kernel patch the judge's memory (harness, pristine "
                                          "inputs, expected outputs)?"),
    HCase("iso_rlimit_of_judge", "I", "corpus_affine",  # prlimit64(getppid(), RLIMIT_CORE, 0, &old)
          _gated("unsigned long old[2]; return raw6(302, raw6(110, 0, 0, 0, 0, 0), 4, 0, (long)old, 0) == 0;"),
          NOT_CORRECT, backends=CPU, note="could the kernel shrink the judge's rlimits (read-only probe)?"),
    HCase("iso_renice_judge", "I", "corpus_affine",  # setpriority(PRIO_PROCESS, ppid, its own nice)
          _gated("long pp = raw6(110, 0, 0, 0, 0, 0); long r = raw6(140, 0, pp, 0, 0, 0); "
                 "return r >= 0 && raw6(141, 0, pp, 20 - r, 0, 0) == 0;"),
          NOT_CORRECT, backends=CPU, note="could the kernel slow the judge down (no-op renice probe)?"),
    HCase("iso_sigqueue_judge", "I", "corpus_affine",  # rt_sigqueueinfo(ppid, 0, {si_code = SI_QUEUE})
          _gated("int info[32] = {0}; info[2] = -1; "
                 "return raw6(129, raw6(110, 0, 0, 0, 0, 0), 0, (long)info, 0, 0) == 0;"),
          NOT_CORRECT, backends=CPU, note="could the kernel signal the judge through rt_sigqueueinfo?"),
    HCase("iso_socket", "I", "corpus_affine",
          _gated("return raw6(41, 2, 1, 0, 0, 0) >= 0;"),  # socket(AF_INET, SOCK_STREAM)
          NOT_CORRECT, backends=CPU, note="could the kernel open a network socket?"),
    HCase("iso_exit_runner", "I", "corpus_affine", _stops("raw3(231, 0, 0, 0);"),  # exit_group(0)
          S({"runtime_error"}), backends=CPU, note="the process running the kernel exits"),
    HCase("iso_control_after_exit", "-", "corpus_affine", AFFINE_SOLUTION, S({"correct"}), backends=CPU,
          note="the device still scores after its runner died"),
    HCase("iso_block_timer_and_spin", "I", "corpus_affine",
          _stops("unsigned long all = ~0ul; raw6(14, 0, (long)&all, 0, 8, 0); for (volatile int k = 0; k == 0;) {}"),
          S({"timeout"}), backends=CPU, note="blocks every signal (the hang timer's too) and spins: "
                                             "the judge's wall deadline kills the runner"),
    HCase("iso_corrupt_runner_stack", "I", "corpus_affine",
          _stops("volatile char* p = (volatile char*)__builtin_frame_address(0); "
                 "for (long k = 0; k < (1 << 20); ++k) p[k] = 0;"),
          S({"runtime_error", "timeout", "correct"}), backends=CPU,
          note="zeroes the stack above it (in-process this smashed the judge's own frames); the "
               "answer is right, so correct is legitimate: what matters is that the judge survives"),
    # ---- C at the compiler: what a pattern check cannot see ---------------------------------------
    HCase("iso_has_include_pasted", "C", "corpus_affine", _sub(
        "#define CAT(a, b) a##b\n#define PROBE CAT(__has_, include)\n"
        f'#if PROBE("{HOST_FILE}")\n#define PRESENT 1\n#else\n#define PRESENT 0\n#endif\n'
        'extern "C" __global__ void affine(const float* x, float* y, int n) {\n'
        "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    if (i < n) y[i] = PRESENT ? 2.0f * x[i] + 1.0f : -7.0f;\n}\n"),
        NOT_CORRECT, backends=CPU, must_not_leak=True,
        note="__has_include spelled by token pasting: right only if the compiler saw the host file"),
    HCase("iso_has_include_plain", "C", "corpus_affine", _sub(
        f'#if __has_include("{HOST_FILE}")\n#define PRESENT 1\n#else\n#define PRESENT 0\n#endif\n'
        'extern "C" __global__ void affine(const float* x, float* y, int n) {\n'
        "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    if (i < n) y[i] = PRESENT ? 2.0f * x[i] + 1.0f : -7.0f;\n}\n"),
        S({"compile_error"}), must_not_leak=True, note="refused before any compiler runs"),
    HCase("iso_truncate_shared_buffers", "I", "corpus_affine",
          _stops("for (long fd = 0; fd < 256; ++fd) { raw3(77, fd, 0, 0); raw6(285, fd, 3, 0, 1 << 20, 0); }"),
          S({"correct", "runtime_error", "wrong_output"}), backends=CPU,
          note="ftruncate / fallocate(PUNCH_HOLE) every descriptor: a shrunk shared buffer would crash the "
               "judge (SIGBUS) when it reads the outputs back"),
)
