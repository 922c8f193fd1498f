"""Level-1 direct convolutions (1-D and 2-D, valid padding, stride 1, no bias) and max/avg pooling.

Convolution solutions give each block one (batch, out-channel) pair and a strip of output positions;
the out-channel's filter is staged in dynamic shared memory. Pooling gives one output per thread with
positions fastest, so loads are coalesced.
"""
from __future__ import annotations

from typing import Any

from kernels_env.tasks import common
from kernels_env.tasks.registry import register
from kernels_env.tasks.spec import Buffer, Scalar, Task

# Dot products of C*K terms accumulated in a different order than the reference's einsum.
CONV_TOL = {"float32": (1e-3, 1e-3)}


def conv1d_ref(xp: Any, x: Any, w: Any) -> Any:
    """y[n, o, l] = sum_{c, k} x[n, c, l + k] * w[o, c, k]."""
    kw = w.shape[2]
    lo = x.shape[2] - kw + 1
    y = xp.zeros((x.shape[0], w.shape[0], lo), dtype=xp.float32)
    for k in range(kw):
        y += xp.einsum("ncl,oc->nol", x[:, :, k:k + lo], w[:, :, k])
    return y.astype(xp.float32, copy=False)


def conv2d_ref(xp: Any, x: Any, w: Any) -> Any:
    """y[n, o, i, j] = sum_{c, a, b} x[n, c, i + a, j + b] * w[o, c, a, b]."""
    kh, kw = w.shape[2], w.shape[3]
    oh, ow = x.shape[2] - kh + 1, x.shape[3] - kw + 1
    y = xp.zeros((x.shape[0], w.shape[0], oh, ow), dtype=xp.float32)
    for a in range(kh):
        for b in range(kw):
            y += xp.einsum("nchw,oc->nohw", x[:, :, a:a + oh, b:b + ow], w[:, :, a, b])
    return y.astype(xp.float32, copy=False)


CONV1D_CUDA = r"""
// grid (cdiv(LO, 256), O, N); w[o] (C*KW floats) staged in dynamic shared memory.
extern "C" __global__ void conv1d_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                         float* __restrict__ y, int C, int L, int O, int KW, int LO) {
    extern __shared__ float ws[];
    int o = blockIdx.y, n = blockIdx.z;
    for (int i = threadIdx.x; i < C * KW; i += blockDim.x) ws[i] = w[(size_t)o * C * KW + i];
    __syncthreads();
    int l = blockIdx.x * blockDim.x + threadIdx.x;
    if (l >= LO) return;
    const float* xn = x + (size_t)n * C * L;
    float acc = 0.0f;
    for (int c = 0; c < C; ++c) {
        const float* xr = xn + (size_t)c * L + l;
        for (int k = 0; k < KW; ++k) acc += xr[k] * ws[c * KW + k];
    }
    y[((size_t)n * O + o) * LO + l] = acc;
}
"""

def conv2d_cuda(name: str = "conv2d_kernel", extra_params: str = "", epilogue: str = "acc") -> str:
    """Direct 2-D convolution kernel; `epilogue` maps `acc` (and `o`) to the stored value. Launch with
    grid dim3(cdiv(OH * OW, 256), O, N), 256 threads and C * KH * KW * 4 bytes of dynamic shared memory."""
    return f"""
// grid (cdiv(OH*OW, 256), O, N); w[o] (C*KH*KW floats) staged in dynamic shared memory.
extern "C" __global__ void {name}(const float* __restrict__ x, const float* __restrict__ w{extra_params},
                                  float* __restrict__ y, int C, int H, int W, int O,
                                  int KH, int KW, int OH, int OW) {{
    extern __shared__ float ws[];
    int o = blockIdx.y, n = blockIdx.z;
    int fsz = C * KH * KW;
    for (int i = threadIdx.x; i < fsz; i += blockDim.x) ws[i] = w[(size_t)o * fsz + i];
    __syncthreads();
    int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= OH * OW) return;
    int oi = p / OW, oj = p - oi * OW;
    const float* xn = x + (size_t)n * C * H * W;
    float acc = 0.0f;
    for (int c = 0; c < C; ++c) {{
        const float* xc = xn + (size_t)c * H * W + (size_t)oi * W + oj;
        const float* wc = ws + c * KH * KW;
        for (int a = 0; a < KH; ++a)
            for (int b = 0; b < KW; ++b) acc += xc[a * W + b] * wc[a * KW + b];
    }}
    y[((size_t)n * O + o) * OH * OW + p] = {epilogue};
}}
"""


CONV2D_CUDA = conv2d_cuda()

TASKS = [
    Task(name="conv1d", level=1,
         description=("1-D convolution (cross-correlation, as in deep-learning frameworks), valid padding, "
                      "stride 1, no bias: y[n, o, l] = sum over c in [0, C) and k in [0, KW) of "
                      "x[n, c, l + k] * w[o, c, k], for l in [0, LO) with LO = L - KW + 1. x is float32 "
                      "[N, C, L], w is float32 [O, C, KW], y is float32 [N, O, LO]; all contiguous row-major."),
         sizes={"eval": {"N": 32, "C": 64, "L": 8192, "O": 64, "KW": 5, "LO": 8188},
                "small": {"N": 2, "C": 3, "L": 50, "O": 4, "KW": 3, "LO": 48}},
         inputs=(Buffer("x", "float32", ("N", "C", "L")), Buffer("w", "float32", ("O", "C", "KW"))),
         outputs=(Buffer("y", "float32", ("N", "O", "LO")),),
         reference=conv1d_ref, tolerance=CONV_TOL,
         solution=common.solution(CONV1D_CUDA, "conv1d_kernel<<<dim3(cdiv(LO, 256), O, N), 256, C * KW * 4>>>"
                                  "(x, w, y, C, L, O, KW, LO);"),
         tags=("conv",)),
    Task(name="conv2d", level=1,
         description=("2-D convolution (cross-correlation), valid padding, stride 1, no bias: y[n, o, i, j] = "
                      "sum over c, a in [0, KH), b in [0, KW) of x[n, c, i + a, j + b] * w[o, c, a, b], with "
                      "OH = H - KH + 1 and OW = W - KW + 1. x is float32 [N, C, H, W] (NCHW), w is float32 "
                      "[O, C, KH, KW], y is float32 [N, O, OH, OW]; all contiguous row-major."),
         sizes={"eval": {"N": 8, "C": 32, "H": 128, "W": 128, "O": 64, "KH": 3, "KW": 3, "OH": 126, "OW": 126},
                "small": {"N": 2, "C": 3, "H": 11, "W": 12, "O": 4, "KH": 3, "KW": 3, "OH": 9, "OW": 10}},
         inputs=(Buffer("x", "float32", ("N", "C", "H", "W")), Buffer("w", "float32", ("O", "C", "KH", "KW"))),
         outputs=(Buffer("y", "float32", ("N", "O", "OH", "OW")),),
         reference=conv2d_ref, tolerance=CONV_TOL,
         solution=common.solution(CONV2D_CUDA, "conv2d_kernel<<<dim3(cdiv(OH * OW, 256), O, N), 256, "
                                  "C * KH * KW * 4>>>(x, w, y, C, H, W, O, KH, KW, OH, OW);"),
         tags=("conv",)),
]


def pool1d_ref(xp: Any, x: Any, kernel_size: int, stride: int, op: str) -> Any:
    lo = (x.shape[2] - kernel_size) // stride + 1
    win = [x[:, :, k:k + stride * (lo - 1) + 1:stride] for k in range(kernel_size)]
    if op == "max":
        out = win[0]
        for v in win[1:]:
            out = xp.maximum(out, v)
    else:
        out = sum(win[1:], win[0]) / kernel_size
    return out.astype(xp.float32, copy=False)


def pool2d_ref(xp: Any, x: Any, kernel_size: int, stride: int, op: str) -> Any:
    oh = (x.shape[2] - kernel_size) // stride + 1
    ow = (x.shape[3] - kernel_size) // stride + 1
    win = [x[:, :, a:a + stride * (oh - 1) + 1:stride, b:b + stride * (ow - 1) + 1:stride]
           for a in range(kernel_size) for b in range(kernel_size)]
    if op == "max":
        out = win[0]
        for v in win[1:]:
            out = xp.maximum(out, v)
    else:
        out = sum(win[1:], win[0]) / (kernel_size * kernel_size)
    return out.astype(xp.float32, copy=False)


_POOL1D = r"""
// One thread per output; rows = N*C, positions fastest.
extern "C" __global__ void NAME_kernel(const float* __restrict__ x, float* __restrict__ y,
                                       int rows, int L, int LO, int ks, int st) {
    long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)rows * LO) return;
    int r = (int)(idx / LO), l = (int)(idx - (long long)r * LO);
    const float* p = x + (size_t)r * L + (size_t)l * st;
    float acc = INIT;
    for (int k = 0; k < ks; ++k) { float v = p[k]; STEP }
    y[idx] = FINAL;
}
"""

_POOL2D = r"""
// One thread per output; planes = N*C, output columns fastest.
extern "C" __global__ void NAME_kernel(const float* __restrict__ x, float* __restrict__ y,
                                       int planes, int H, int W, int OH, int OW, int ks, int st) {
    long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)planes * OH * OW) return;
    int plane = (int)(idx / (OH * OW));
    int rem = (int)(idx - (long long)plane * OH * OW);
    int oi = rem / OW, oj = rem - oi * OW;
    const float* p = x + (size_t)plane * H * W + (size_t)(oi * st) * W + oj * st;
    float acc = INIT;
    for (int a = 0; a < ks; ++a)
        for (int b = 0; b < ks; ++b) { float v = p[a * W + b]; STEP }
    y[idx] = FINAL;
}
"""

_OPS = {"max": ("-3.402823466e+38f", "acc = fmaxf(acc, v);", "acc"),
        "avg": ("0.0f", "acc += v;", "acc / (float)(DIV)")}


def _pool_cuda(template: str, name: str, op: str, div: str) -> str:
    init, step, final = _OPS[op]
    return (template.replace("NAME", name).replace("INIT", init).replace("STEP", step)
            .replace("FINAL", final.replace("DIV", div)))


def pool_task(op: str, dims: int) -> Task:
    name = f"{op}pool{dims}d_nopad"  # not KernelBench's *_Pooling_*D (those pad and dilate)
    what = "maximum" if op == "max" else "mean"
    ks, st = (4, 2) if dims == 1 else (3, 2)
    scalars = (Scalar("kernel_size", "int32", ks), Scalar("stride", "int32", st))
    if dims == 1:
        sizes = {"eval": {"N": 64, "C": 64, "L": 16384, "LO": (16384 - ks) // st + 1},
                 "small": {"N": 2, "C": 3, "L": 101, "LO": (101 - ks) // st + 1}}
        inputs, out = (Buffer("x", "float32", ("N", "C", "L")),), Buffer("y", "float32", ("N", "C", "LO"))
        desc = (f"1-D {op} pooling without padding: y[n, c, l] = {what} of x[n, c, l*stride + k] over k in "
                f"[0, kernel_size), with kernel_size = {ks}, stride = {st} and LO = (L - kernel_size) // stride "
                f"+ 1 (windows that would run past the end are dropped). x is float32 [N, C, L], y is float32 "
                f"[N, C, LO], contiguous row-major.")
        cuda = _pool_cuda(_POOL1D, name, op, "ks")
        launch = f"{name}_kernel<<<cdiv(N * C * LO, 256), 256>>>(x, y, N * C, L, LO, kernel_size, stride);"
        ref = lambda xp, x, kernel_size, stride: pool1d_ref(xp, x, kernel_size, stride, op)  # noqa: E731
    else:
        eo, so = (182 - ks) // st + 1, (13 - ks) // st + 1
        sizes = {"eval": {"N": 32, "C": 64, "H": 182, "W": 182, "OH": eo, "OW": eo},
                 "small": {"N": 2, "C": 3, "H": 13, "W": 14, "OH": so, "OW": (14 - ks) // st + 1}}
        inputs, out = (Buffer("x", "float32", ("N", "C", "H", "W")),), Buffer("y", "float32", ("N", "C", "OH", "OW"))
        desc = (f"2-D {op} pooling without padding: y[n, c, i, j] = {what} of x[n, c, i*stride + a, "
                f"j*stride + b] over a, b in [0, kernel_size), with kernel_size = {ks}, stride = {st}, "
                f"OH = (H - kernel_size) // stride + 1 and OW = (W - kernel_size) // stride + 1. x is float32 "
                f"[N, C, H, W] (NCHW), y is float32 [N, C, OH, OW], contiguous row-major.")
        cuda = _pool_cuda(_POOL2D, name, op, "ks * ks")
        launch = (f"{name}_kernel<<<cdiv(N * C * OH * OW, 256), 256>>>(x, y, N * C, H, W, OH, OW, "
                  f"kernel_size, stride);")
        ref = lambda xp, x, kernel_size, stride: pool2d_ref(xp, x, kernel_size, stride, op)  # noqa: E731
    return Task(name=name, level=1, description=desc, sizes=sizes, inputs=inputs, outputs=(out,),
                reference=ref, scalars=scalars, solution=common.solution(cuda, launch), tags=("pool",))


TASKS += [pool_task(op, d) for op in ("max", "avg") for d in (1, 2)]

for _t in TASKS:
    register(_t)
