"""Moving bytes onto the rack: one pipelined chain for engine images and model weights.

- chain.py     the chain itself: a source sends a stream ONCE; each node keeps it (docker
               load, or the model files it needs) while forwarding it to the next
               (sparkrack/remote/relay.py on every hop)
- images.py    an image onto nodes through the chain, checked by ID (provisioning's
               engine_images and onboarding's stage)
- manifest.py  `sparkrack-manifest.sha256`: reading it, comparing nodes' manifests
- weights.py   a model directory onto nodes through the chain: the manifest made once at
               the source, present files skipped, partial files resumed, the manifest
               written last (`invoke weights.stage`, onboarding's stage)
- models.py    the staged models on the nodes: verify, list, remove, the `up` gate
- show.py      progress per node and the tables of the weights.* tasks
"""
