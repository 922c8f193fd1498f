"""Compile a checked submission: NVRTC, the std prelude both compilers pre-include, the Landlock jail."""
