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


# ---- KernelBench conv / pool variants (3-D, transposed, depthwise, strided + dilated, padded 3-D pools) ----

def conv3d_ref(xp: Any, x: Any, w: Any) -> Any:
    """y[n, o, d, i, j] = sum_{c, a, b, e} x[n, c, d + a, i + b, j + e] * w[o, c, a, b, e]."""
    kd, kh, kw = w.shape[2], w.shape[3], w.shape[4]
    od, oh, ow = x.shape[2] - kd + 1, x.shape[3] - kh + 1, x.shape[4] - kw + 1
    y = xp.zeros((x.shape[0], w.shape[0], od, oh, ow), dtype=xp.float32)
    for a in range(kd):
        for b in range(kh):
            for e in range(kw):
                y += xp.einsum("ncdhw,oc->nodhw", x[:, :, a:a + od, b:b + oh, e:e + ow], w[:, :, a, b, e])
    return y.astype(xp.float32, copy=False)


def conv_transpose2d_ref(xp: Any, x: Any, w: Any) -> Any:
    """y[n, o, i + a, j + b] += x[n, c, i, j] * w[c, o, a, b] (stride 1, no padding)."""
    h, wd = x.shape[2], x.shape[3]
    kh, kw = w.shape[2], w.shape[3]
    y = xp.zeros((x.shape[0], w.shape[1], h + kh - 1, wd + kw - 1), dtype=xp.float32)
    for a in range(kh):
        for b in range(kw):
            y[:, :, a:a + h, b:b + wd] += xp.einsum("nchw,co->nohw", x, w[:, :, a, b])
    return y.astype(xp.float32, copy=False)


def conv_depthwise2d_ref(xp: Any, x: Any, w: Any) -> Any:
    """y[n, c, i, j] = sum_{a, b} x[n, c, i + a, j + b] * w[c, 0, a, b]."""
    kh, kw = w.shape[2], w.shape[3]
    oh, ow = x.shape[2] - kh + 1, x.shape[3] - kw + 1
    y = xp.zeros((x.shape[0], x.shape[1], oh, ow), dtype=xp.float32)
    for a in range(kh):
        for b in range(kw):
            y += x[:, :, a:a + oh, b:b + ow] * w[:, 0, a, b].reshape(1, -1, 1, 1)
    return y.astype(xp.float32, copy=False)


def conv1d_dilated_strided_ref(xp: Any, x: Any, w: Any, stride: int, dilation: int) -> Any:
    """y[n, o, l] = sum_{c, k} x[n, c, l * stride + k * dilation] * w[o, c, k]."""
    kw = w.shape[2]
    lo = (x.shape[2] - dilation * (kw - 1) - 1) // stride + 1
    y = xp.zeros((x.shape[0], w.shape[0], lo), dtype=xp.float32)
    for k in range(kw):
        s = k * dilation
        y += xp.einsum("ncl,oc->nol", x[:, :, s:s + stride * (lo - 1) + 1:stride], w[:, :, k])
    return y.astype(xp.float32, copy=False)


def pool3d_ref(xp: Any, x: Any, kernel_size: int, stride: int, padding: int, dilation: int, op: str) -> Any:
    """torch max_pool3d / avg_pool3d (count_include_pad=True, ceil_mode=False) over a padded x."""
    pad_value = -xp.inf if op == "max" else 0.0
    p = padding
    xpad = xp.pad(x, ((0, 0), (0, 0), (p, p), (p, p), (p, p)), mode="constant", constant_values=pad_value)
    span = dilation * (kernel_size - 1) + 1
    outs = [(xpad.shape[2 + d] - span) // stride + 1 for d in range(3)]
    win = []
    for a in range(kernel_size):
        for b in range(kernel_size):
            for e in range(kernel_size):
                s = [k * dilation for k in (a, b, e)]
                win.append(xpad[:, :, s[0]:s[0] + stride * (outs[0] - 1) + 1:stride,
                                s[1]:s[1] + stride * (outs[1] - 1) + 1:stride,
                                s[2]:s[2] + stride * (outs[2] - 1) + 1:stride])
    if op == "max":
        out = win[0]
        for v in win[1:]:
            out = xp.maximum(out, v)
    else:
        out = sum(win[1:], win[0]) / float(kernel_size ** 3)
    return out.astype(xp.float32, copy=False)


CONV3D_CUDA = r"""
// grid (cdiv(OD*OH*OW, 256), O, N); w[o] (C*KD*KH*KW floats) staged in dynamic shared memory.
extern "C" __global__ void conv3d_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                         float* __restrict__ y, int C, int D, int H, int W, int O,
                                         int KD, int KH, int KW, int OD, int OH, int OW) {
    extern __shared__ float ws[];
    int o = blockIdx.y, n = blockIdx.z;
    int fsz = C * KD * KH * KW;
    for (int i = threadIdx.x; i < fsz; i += blockDim.x) ws[i] = w[(size_t)o * fsz + i];
    __syncthreads();
    int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= OD * OH * OW) return;
    int od = p / (OH * OW), r = p - od * OH * OW;
    int oi = r / OW, oj = r - oi * OW;
    const float* xn = x + (size_t)n * C * D * H * W;
    float acc = 0.0f;
    for (int c = 0; c < C; ++c) {
        const float* xc = xn + (size_t)c * D * H * W + ((size_t)od * H + oi) * W + oj;
        const float* wc = ws + c * KD * KH * KW;
        for (int a = 0; a < KD; ++a)
            for (int b = 0; b < KH; ++b)
                for (int e = 0; e < KW; ++e) acc += xc[((size_t)a * H + b) * W + e] * wc[(a * KH + b) * KW + e];
    }
    y[((size_t)n * O + o) * OD * OH * OW + p] = acc;
}
"""

CONV_TRANSPOSE2D_CUDA = r"""
// Gather form: each thread owns one output y[n, o, i, j] and sums x[n, c, i - a, j - b] * w[c, o, a, b]
// over the taps that land inside x. grid (cdiv(OH*OW, 256), O, N); w[:, o] (C*KH*KW floats) in shared memory.
extern "C" __global__ void conv_transpose2d_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                                   float* __restrict__ y, int C, int H, int W, int O,
                                                   int KH, int KW, int OH, int OW) {
    extern __shared__ float ws[];
    int o = blockIdx.y, n = blockIdx.z;
    int taps = KH * KW;
    for (int i = threadIdx.x; i < C * taps; i += blockDim.x) {
        int c = i / taps, t = i - c * taps;
        ws[i] = w[((size_t)c * O + o) * taps + t];
    }
    __syncthreads();
    int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= OH * OW) return;
    int oi = p / OW, oj = p - oi * OW;
    const float* xn = x + (size_t)n * C * H * W;
    float acc = 0.0f;
    for (int a = 0; a < KH; ++a) {
        int ii = oi - a;
        if (ii < 0 || ii >= H) continue;
        for (int b = 0; b < KW; ++b) {
            int jj = oj - b;
            if (jj < 0 || jj >= W) continue;
            const float* xp = xn + (size_t)ii * W + jj;
            for (int c = 0; c < C; ++c) acc += xp[(size_t)c * H * W] * ws[c * taps + a * KW + b];
        }
    }
    y[((size_t)n * O + o) * OH * OW + p] = acc;
}
"""

CONV_DEPTHWISE2D_CUDA = r"""
// One thread per output, output columns fastest; planes = N*C, the plane's channel picks its filter.
extern "C" __global__ void conv_depthwise2d_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                                   float* __restrict__ y, int planes, int C, int H, int W,
                                                   int KH, int KW, int OH, int OW) {
    long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)planes * OH * OW) return;
    int plane = (int)(idx / (OH * OW));
    int rem = (int)(idx - (long long)plane * OH * OW);
    int oi = rem / OW, oj = rem - oi * OW;
    const float* p = x + (size_t)plane * H * W + (size_t)oi * W + oj;
    const float* f = w + (size_t)(plane % C) * KH * KW;
    float acc = 0.0f;
    for (int a = 0; a < KH; ++a)
        for (int b = 0; b < KW; ++b) acc += p[a * W + b] * f[a * KW + b];
    y[idx] = acc;
}
"""

CONV1D_DS_CUDA = r"""
// grid (cdiv(LO, 256), O, N); w[o] (C*KW floats) staged in dynamic shared memory.
extern "C" __global__ void conv1d_ds_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                            float* __restrict__ y, int C, int L, int O, int KW, int LO,
                                            int stride, int dilation) {
    extern __shared__ float ws[];
    int o = blockIdx.y, n = blockIdx.z;
    for (int i = threadIdx.x; i < C * KW; i += blockDim.x) ws[i] = w[(size_t)o * C * KW + i];
    __syncthreads();
    int l = blockIdx.x * blockDim.x + threadIdx.x;
    if (l >= LO) return;
    const float* xn = x + (size_t)n * C * L + (size_t)l * stride;
    float acc = 0.0f;
    for (int c = 0; c < C; ++c) {
        const float* xr = xn + (size_t)c * L;
        for (int k = 0; k < KW; ++k) acc += xr[k * dilation] * ws[c * KW + k];
    }
    y[((size_t)n * O + o) * LO + l] = acc;
}
"""

_POOL3D = r"""
// One thread per output, output columns fastest; planes = N*C; taps outside x are padding.
extern "C" __global__ void NAME_kernel(const float* __restrict__ x, float* __restrict__ y, int planes,
                                       int D, int H, int W, int OD, int OH, int OW,
                                       int ks, int st, int pad, int dil) {
    long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long per = (long long)OD * OH * OW;
    if (idx >= (long long)planes * per) return;
    int plane = (int)(idx / per);
    int rem = (int)(idx - (long long)plane * per);
    int od = rem / (OH * OW);
    rem -= od * OH * OW;
    int oi = rem / OW, oj = rem - oi * OW;
    const float* p = x + (size_t)plane * D * H * W;
    float acc = INIT;
    for (int a = 0; a < ks; ++a) {
        int d = od * st - pad + a * dil;
        if (d < 0 || d >= D) continue;
        for (int b = 0; b < ks; ++b) {
            int i = oi * st - pad + b * dil;
            if (i < 0 || i >= H) continue;
            for (int e = 0; e < ks; ++e) {
                int j = oj * st - pad + e * dil;
                if (j < 0 || j >= W) continue;
                float v = p[((size_t)d * H + i) * W + j];
                STEP
            }
        }
    }
    y[idx] = FINAL;
}
"""


def _pool3d_out(n: int, ks: int, st: int, pad: int, dil: int) -> int:
    return (n + 2 * pad - dil * (ks - 1) - 1) // st + 1


def pool3d_task(op: str) -> Task:
    """KernelBench 43_Max_Pooling_3D (k 3, stride 2, padding 1, dilation 3) / 46_Average_Pooling_3D (k 3,
    stride 2, padding 1; count_include_pad=True: every window divides by k^3)."""
    name = f"{op}pool3d"
    ks, st, pad, dil = (3, 2, 1, 3) if op == "max" else (3, 2, 1, 1)

    def sz(n: int, c: int, d: int, h: int, w: int) -> dict[str, int]:
        return {"N": n, "C": c, "D": d, "H": h, "W": w, "OD": _pool3d_out(d, ks, st, pad, dil),
                "OH": _pool3d_out(h, ks, st, pad, dil), "OW": _pool3d_out(w, ks, st, pad, dil)}

    scalars: tuple[Scalar, ...] = (Scalar("kernel_size", "int32", ks), Scalar("stride", "int32", st),
                                   Scalar("padding", "int32", pad))
    if op == "max":
        scalars += (Scalar("dilation", "int32", dil),)
        what = ("torch.nn.MaxPool3d(kernel_size=3, stride=2, padding=1, dilation=3) as in KernelBench "
                "43_Max_Pooling_3D: y[n, c, d, i, j] = maximum of x[n, c, d*stride - padding + a*dilation, "
                "i*stride - padding + b*dilation, j*stride - padding + e*dilation] over a, b, e in [0, "
                "kernel_size), taps outside x ignored (padding is -inf); each output size is "
                "(size + 2*padding - dilation*(kernel_size - 1) - 1) // stride + 1.")
        dil_arg = "dilation"
    else:
        what = ("torch.nn.AvgPool3d(kernel_size=3, stride=2, padding=1) as in KernelBench 46_Average_Pooling_3D "
                "(count_include_pad=True): y[n, c, d, i, j] = (1 / kernel_size^3) * sum of x[n, c, d*stride - "
                "padding + a, i*stride - padding + b, j*stride - padding + e] over a, b, e in [0, kernel_size), "
                "taps outside x counting as zero (the divisor is always 27); each output size is "
                "(size + 2*padding - kernel_size) // stride + 1.")
        dil_arg = "1"
    desc = (f"3-D {op} pooling, {what} x is float32 [N, C, D, H, W], y is float32 [N, C, OD, OH, OW], "
            "contiguous row-major.")
    cuda = _pool_cuda(_POOL3D, name, op, "ks * ks * ks")
    launch = (f"{name}_kernel<<<cdiv(N * C * OD * OH * OW, 256), 256>>>(x, y, N * C, D, H, W, OD, OH, OW, "
              f"kernel_size, stride, padding, {dil_arg});")

    def ref(xp: Any, x: Any, kernel_size: int, stride: int, padding: int, dilation: int = 1) -> Any:
        return pool3d_ref(xp, x, kernel_size, stride, padding, dilation, op)

    return Task(name=name, level=1, description=desc,
                sizes={"eval": sz(8, 16, 64, 64, 64), "small": sz(2, 2, 9, 10, 11)},
                inputs=(Buffer("x", "float32", ("N", "C", "D", "H", "W")),),
                outputs=(Buffer("y", "float32", ("N", "C", "OD", "OH", "OW")),),
                reference=ref, scalars=scalars, solution=common.solution(cuda, launch),
                tags=("pool", "kernelbench"))


_NO_BIAS = "no bias (bias=False, as the KernelBench model)"
_DS_LO = (16384 - 4 * 2 - 1) // 3 + 1
_DS_LO_SMALL = (50 - 4 * 2 - 1) // 3 + 1
KB_CONV_TASKS = [
    Task(name="conv3d", level=1,
         description=("3-D convolution as torch.nn.Conv3d(C, O, kernel_size) with its defaults (stride 1, padding "
                      f"0, dilation 1, groups 1) and {_NO_BIAS}, KernelBench 54_conv_standard_3D__square_input__"
                      "square_kernel: y[n, o, d, i, j] = sum over c, a in [0, KD), b in [0, KH), e in [0, KW) of "
                      "x[n, c, d + a, i + b, j + e] * w[o, c, a, b, e], with OD = D - KD + 1, OH = H - KH + 1, "
                      "OW = W - KW + 1. x is float32 [N, C, D, H, W], w (the module's weight) float32 "
                      "[O, C, KD, KH, KW], y float32 [N, O, OD, OH, OW]; all contiguous row-major."),
         sizes={"eval": {"N": 4, "C": 8, "D": 34, "H": 34, "W": 34, "O": 32, "KD": 3, "KH": 3, "KW": 3,
                         "OD": 32, "OH": 32, "OW": 32},
                "small": {"N": 2, "C": 2, "D": 5, "H": 6, "W": 7, "O": 3, "KD": 3, "KH": 3, "KW": 3,
                          "OD": 3, "OH": 4, "OW": 5}},
         inputs=(Buffer("x", "float32", ("N", "C", "D", "H", "W")),
                 Buffer("w", "float32", ("O", "C", "KD", "KH", "KW"))),
         outputs=(Buffer("y", "float32", ("N", "O", "OD", "OH", "OW")),),
         reference=conv3d_ref, tolerance=CONV_TOL,
         solution=common.solution(CONV3D_CUDA, "conv3d_kernel<<<dim3(cdiv(OD * OH * OW, 256), O, N), 256, "
                                  "C * KD * KH * KW * 4>>>(x, w, y, C, D, H, W, O, KD, KH, KW, OD, OH, OW);"),
         tags=("conv", "kernelbench")),
    Task(name="conv_transpose2d", level=1,
         description=("Transposed 2-D convolution as torch.nn.ConvTranspose2d(C, O, kernel_size) with its defaults "
                      f"(stride 1, padding 0, output_padding 0, groups 1) and {_NO_BIAS}, KernelBench 57_conv_"
                      "transposed_2D__square_input__square_kernel: y[n, o, i, j] = sum over c, a in [0, KH), b in "
                      "[0, KW) of x[n, c, i - a, j - b] * w[c, o, a, b], taking only terms with 0 <= i - a < H and "
                      "0 <= j - b < W, with OH = H + KH - 1 and OW = W + KW - 1. x is float32 [N, C, H, W], w (the "
                      "module's weight, laid out [in, out, KH, KW]) float32 [C, O, KH, KW], y float32 "
                      "[N, O, OH, OW]; all contiguous row-major."),
         sizes={"eval": {"N": 8, "C": 32, "H": 128, "W": 128, "O": 32, "KH": 3, "KW": 3, "OH": 130, "OW": 130},
                "small": {"N": 2, "C": 3, "H": 7, "W": 8, "O": 4, "KH": 3, "KW": 3, "OH": 9, "OW": 10}},
         inputs=(Buffer("x", "float32", ("N", "C", "H", "W")), Buffer("w", "float32", ("C", "O", "KH", "KW"))),
         outputs=(Buffer("y", "float32", ("N", "O", "OH", "OW")),),
         reference=conv_transpose2d_ref, tolerance=CONV_TOL,
         solution=common.solution(CONV_TRANSPOSE2D_CUDA, "conv_transpose2d_kernel<<<dim3(cdiv(OH * OW, 256), O, N), "
                                  "256, C * KH * KW * 4>>>(x, w, y, C, H, W, O, KH, KW, OH, OW);"),
         tags=("conv", "kernelbench")),
    Task(name="conv_depthwise2d", level=1,
         description=("Depthwise 2-D convolution as torch.nn.Conv2d(C, C, kernel_size, groups=C) with stride 1, "
                      f"padding 0 and {_NO_BIAS}, KernelBench 82_conv_depthwise_2D_square_input_square_kernel: each "
                      "channel is convolved with its own filter, y[n, c, i, j] = sum over a in [0, KH), b in "
                      "[0, KW) of x[n, c, i + a, j + b] * w[c, 0, a, b], with OH = H - KH + 1 and OW = W - KW + 1. "
                      "x is float32 [N, C, H, W], w (the module's weight) float32 [C, 1, KH, KW], y float32 "
                      "[N, C, OH, OW]; all contiguous row-major."),
         sizes={"eval": {"N": 16, "C": 64, "H": 130, "W": 130, "KH": 3, "KW": 3, "OH": 128, "OW": 128},
                "small": {"N": 2, "C": 3, "H": 9, "W": 10, "KH": 3, "KW": 3, "OH": 7, "OW": 8}},
         inputs=(Buffer("x", "float32", ("N", "C", "H", "W")), Buffer("w", "float32", ("C", 1, "KH", "KW"))),
         outputs=(Buffer("y", "float32", ("N", "C", "OH", "OW")),),
         reference=conv_depthwise2d_ref, tolerance=CONV_TOL,
         solution=common.solution(CONV_DEPTHWISE2D_CUDA, "conv_depthwise2d_kernel<<<cdiv(N * C * OH * OW, 256), "
                                  "256>>>(x, w, y, N * C, C, H, W, KH, KW, OH, OW);"),
         tags=("conv", "kernelbench")),
    Task(name="conv1d_dilated_strided", level=1,
         description=("Strided, dilated 1-D convolution as torch.nn.Conv1d(C, O, kernel_size, stride=3, "
                      f"dilation=4) with padding 0 and {_NO_BIAS}, KernelBench 76_conv_standard_1D_dilated_strided__: "
                      "y[n, o, l] = sum over c in [0, C) and k in [0, KW) of x[n, c, l * stride + k * dilation] * "
                      "w[o, c, k], for l in [0, LO) with LO = (L - dilation * (KW - 1) - 1) // stride + 1. x is "
                      "float32 [N, C, L], w (the module's weight) float32 [O, C, KW], y float32 [N, O, LO]; all "
                      "contiguous row-major."),
         sizes={"eval": {"N": 16, "C": 64, "L": 16384, "O": 128, "KW": 3, "LO": _DS_LO},
                "small": {"N": 2, "C": 3, "L": 50, "O": 4, "KW": 3, "LO": _DS_LO_SMALL}},
         inputs=(Buffer("x", "float32", ("N", "C", "L")), Buffer("w", "float32", ("O", "C", "KW"))),
         outputs=(Buffer("y", "float32", ("N", "O", "LO")),),
         scalars=(Scalar("stride", "int32", 3), Scalar("dilation", "int32", 4)),
         reference=conv1d_dilated_strided_ref, tolerance=CONV_TOL,
         solution=common.solution(CONV1D_DS_CUDA, "conv1d_ds_kernel<<<dim3(cdiv(LO, 256), O, N), 256, C * KW * 4>>>"
                                  "(x, w, y, C, L, O, KW, LO, stride, dilation);"),
         tags=("conv", "kernelbench")),
    pool3d_task("max"),
    pool3d_task("avg"),
]

for _t in KB_CONV_TASKS:
    register(_t)
