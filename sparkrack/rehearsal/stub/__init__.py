"""Stub SGLang and vLLM engines for the rehearsal rack (issue 4, item 6).

Runtime (stdlib only, copied into the stub images as the package `sparkrack_stub`):
- cli.py     the real engines' command lines as argparse parsers (unknown flag: exit 2);
- config.py  `{model_path}/sparkrack-stub.json`: load delay, token rate, faults per rank;
- group.py   the TP group over TCP: workers meet rank 0 at the dist-init / master address;
- gpu.py     the node's simulated unified memory and load (gpusimd), held like a CUDA context;
- leak.py    the SGLang DSA indexer scratch of the field report (ratchet vs bounded);
- server.py  HTTP: OpenAI-compatible API (SSE), health, info, Prometheus metrics;
- engine.py  one rank's life: record argv/env, join, load, serve, drain, die with the group.

Control side (not in the image): modeldir.py writes the model directory on the nodes;
sparkrack/rehearsal/stubimage.py builds the deterministic `docker save` tars. The node's
no-op `nvidia-container-runtime-hook` (sim/) lets dockerd accept `--gpus all`.
"""
