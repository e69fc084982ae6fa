"""Stub SGLang and vLLM engines for the rehearsal rack: stdlib only, copied into the stub
images as the package `sparkrack_stub` (each module: docs/rehearsal.md#the-stub-engines).
"""
