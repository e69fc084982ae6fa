"""Stub SGLang and vLLM engines for the rehearsal rack (issue 4, item 6).

Runtime (stdlib only, copied into the stub images as the package `sparkrack_stub`):
engine.py (the entry), head.py (rank 0), worker.py (ranks >= 1), api.py (rank 0's HTTP)
and the modules they use, one concern each: docs/rehearsal.md#the-stub-engines.

Control side (not in the image): modeldir.py writes the model directory on the nodes;
sparkrack/rehearsal/stubimage.py builds the deterministic `docker save` tars. The node's
no-op `nvidia-container-runtime-hook` (sim/) lets dockerd accept `--gpus all`.
"""
