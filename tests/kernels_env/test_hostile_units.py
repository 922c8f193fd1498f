"""Unit tests of the hardening layers the hostile corpus relies on (each layer on its own, so one
layer's bug is not hidden by another)."""
from __future__ import annotations

import pytest

from kernels_env.build.compile import CompileError, log_mentions_foreign_file, redact_paths
from kernels_env.source.source_text import directives

SECRET = "/etc/passwd"


@pytest.mark.parametrize("src", [
    f'#include "{SECRET}"', f'\f#\finclude "{SECRET}"', f'\v # include "{SECRET}"', f'#inc\\\nlude "{SECRET}"',
    f'#  \\  \n include "{SECRET}"', f'#/* c */include "{SECRET}"', f'/* c */ #include "{SECRET}"',
    f'%:include "{SECRET}"', f'%\\\n:include "{SECRET}"', f'const char* s = R"(\n/*)";\n#include "{SECRET}"\n// */',
    f"int a = 1'0 + '/*';\n#include \"{SECRET}\"\n// */", f'x = "/*";\n#include "{SECRET}"',
    f'/*\n*/ #include "{SECRET}"', f'#define F "{SECRET}"\n#include F', f'#include_next "{SECRET}"',
    f'R"x(\n)x"\n#include "{SECRET}"', f'u8R"(\n)"\n#include "{SECRET}"',
])
def test_directive_scanner_finds_disguised_includes(src):
    assert any(name.startswith("include") for _, name, _ in directives(src)), src


@pytest.mark.parametrize("src", [
    f'// c \\\n#include "{SECRET}"', f'R"x(\n#include "{SECRET}"\n)x"', f'int x; /*\n#include "{SECRET}"\n*/',
    f'"#include \\"{SECRET}\\""',
])
def test_directive_scanner_ignores_what_the_compiler_ignores(src):
    assert not [d for d in directives(src) if d[1].startswith("include")], src


def test_redact_paths():
    assert redact_paths("/home/u/x/.venv/lib/site.py:3: boom") == "<path>/site.py:3: boom"
    assert redact_paths("kernel.cu(3): error: N / 2 / 3") == "kernel.cu(3): error: N / 2 / 3"
    assert redact_paths("<cuda>/crt/mma.h(1)") == "<cuda>/crt/mma.h(1)"
    assert "/etc" not in redact_paths('cannot open "/etc/shadow"')


def test_foreign_file_in_log_is_detected():
    assert log_mentions_foreign_file('/etc/passwd(1): error: this declaration has no type\n  root:x:0:0')
    assert not log_mentions_foreign_file('kernel.cu(3): error: expected a ";"')


def test_nvrtc_withholds_a_log_from_a_foreign_file(monkeypatch):
    """With the include check switched off, the compiler-side guard still keeps the file out."""
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    from kernels_env.build import compile as C
    monkeypatch.setattr(C, "check_includes", lambda source: None)
    with pytest.raises(CompileError) as ei:
        C.compile_cuda(f'#include "{SECRET}"\nextern "C" __global__ void k() {{}}', "sm_90")
    assert "root:" not in ei.value.log and SECRET not in ei.value.log


def test_cpu_build_refuses_files_outside_the_allowed_headers():
    from kernels_env.backends.cpu.build import BuildError, build
    with pytest.raises(BuildError) as ei:
        build(f'#include "{SECRET}"\nint x;')
    # the compiler cannot see the file (private root: "No such file"; Landlock only: "Permission
    # denied"); without either, the -H check withholds the log
    log = ei.value.log
    assert "root:" not in log and any(w in log for w in ("No such file", "Permission denied", "withheld"))


def test_cpu_build_log_has_no_header_listing():
    from kernels_env.backends.cpu.build import BuildError, build
    with pytest.raises(BuildError) as ei:
        build("#include <cmath>\nint x = ;")
    assert "/usr/include" not in ei.value.log and "expected" in ei.value.log
